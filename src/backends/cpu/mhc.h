// Manifold-constrained hyper-connections (model-spec.md §3.5): mixes with Sinkhorn, collapse of
// the C streams into one row, expand of a sub-layer output back into C streams.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/cpu/linear.h"

namespace dsv4::cpu {

struct HcParams {            // one sub-layer's `hc_X_*` tensors
  const Matrix* fn = nullptr;  // f32 [C*(C+2), C*D]
  Vec base;                    // f32 [C*(C+2)]
  Vec scale;                   // f32 [3]
};
inline HcParams hc_attn_params(const family::LayerWeights& w) {
  return {&w.hc_attn_fn, floats(w.hc_attn_base), floats(w.hc_attn_scale)};
}
inline HcParams hc_ffn_params(const family::LayerWeights& w) {
  return {&w.hc_ffn_fn, floats(w.hc_ffn_base), floats(w.hc_ffn_scale)};
}

// Mixing coefficients of one row, all in Acc: pre [C], post [C], A [C][C] (source j, dest k).
template <typename Acc>
struct HcMix {
  std::vector<Acc> pre, post, A;
};

template <typename Acc>
inline Acc sigmoid(Acc x) { return static_cast<Acc>(1) / (static_cast<Acc>(1) + std::exp(-x)); }

// Sinkhorn of §3.5 on a C x C matrix of logits: row softmax + eps, column normalisation, then
// (iters - 1) x {row, column}, every denominator + eps.
template <typename Acc>
void sinkhorn(Acc* A, int C, int iters, Acc eps) {
  for (int j = 0; j < C; ++j) {
    Acc mx = A[j * C];
    for (int k = 1; k < C; ++k) mx = std::max(mx, A[j * C + k]);
    Acc sum = 0;
    for (int k = 0; k < C; ++k) { A[j * C + k] = std::exp(A[j * C + k] - mx); sum += A[j * C + k]; }
    for (int k = 0; k < C; ++k) A[j * C + k] = A[j * C + k] / sum + eps;
  }
  auto columns = [&] {
    for (int k = 0; k < C; ++k) {
      Acc sum = 0;
      for (int j = 0; j < C; ++j) sum += A[j * C + k];
      for (int j = 0; j < C; ++j) A[j * C + k] = A[j * C + k] / (sum + eps);
    }
  };
  columns();
  for (int it = 1; it < iters; ++it) {
    for (int j = 0; j < C; ++j) {
      Acc sum = 0;
      for (int k = 0; k < C; ++k) sum += A[j * C + k];
      for (int k = 0; k < C; ++k) A[j * C + k] = A[j * C + k] / (sum + eps);
    }
    columns();
  }
}

// mixes(h): h bf16 [rows, C, D] -> coefficients per row. rho = rsqrt(mean(x^2) + norm_eps) over
// all C*D values scales the GEMV of the un-normalised stream.
template <typename Acc>
std::vector<HcMix<Acc>> hc_mixes(ThreadPool& pool, const float* h, int64_t rows, int C, int64_t D,
                                 const HcParams& P, float norm_eps, float hc_eps, int iters) {
  const int64_t n = static_cast<int64_t>(C) * D, nm = static_cast<int64_t>(C) * (C + 2);
  std::vector<Acc> x(rows * n), m(rows * nm);
  for (int64_t i = 0; i < rows * n; ++i) x[i] = h[i];
  f32_linear<Acc>(pool, x.data(), rows, *P.fn, m.data());
  std::vector<HcMix<Acc>> out(rows);
  const Acc eps = hc_eps, s0 = P.scale[0], s1 = P.scale[1], s2 = P.scale[2];
  for (int64_t r = 0; r < rows; ++r) {
    const Acc mean = dot<Acc>(h + r * n, h + r * n, n) / static_cast<Acc>(n);
    const Acc rho = static_cast<Acc>(1) / std::sqrt(mean + static_cast<Acc>(norm_eps));
    Acc* mr = &m[r * nm];
    for (int64_t i = 0; i < nm; ++i) mr[i] = mr[i] * rho;
    HcMix<Acc>& o = out[r];
    o.pre.resize(C);
    o.post.resize(C);
    o.A.resize(C * C);
    for (int j = 0; j < C; ++j) {
      o.pre[j] = sigmoid<Acc>(mr[j] * s0 + static_cast<Acc>(P.base[j])) + eps;
      o.post[j] = static_cast<Acc>(2) * sigmoid<Acc>(mr[C + j] * s1 + static_cast<Acc>(P.base[C + j]));
    }
    for (int i = 0; i < C * C; ++i) o.A[i] = mr[2 * C + i] * s2 + static_cast<Acc>(P.base[2 * C + i]);
    sinkhorn<Acc>(o.A.data(), C, iters, eps);
  }
  return out;
}

// Collapse: y = bf16( sum_c pi_c * h_c ), h bf16 [C, D] of one row; pre (tests): the sums before the rounding [D].
template <typename Acc>
void hc_collapse(const float* h, int C, int64_t D, const std::vector<Acc>& pi, float* y, Acc* pre = nullptr) {
  for (int64_t i = 0; i < D; ++i) {
    Acc s = 0;
    for (int c = 0; c < C; ++c) s += pi[c] * static_cast<Acc>(h[c * D + i]);
    if (pre) pre[i] = s;
    y[i] = round_bf16(s);
  }
}

// Expand: h'_k = bf16( post_k * y + sum_j A[j][k] * h_j ) for one row, in place on h [C, D]; pre (tests): the
// values before the rounding [C, D].
template <typename Acc>
void hc_expand(const float* y, float* h, int C, int64_t D, const HcMix<Acc>& mix, Acc* pre = nullptr) {
  std::vector<float> out(C * D);
  for (int k = 0; k < C; ++k)
    for (int64_t i = 0; i < D; ++i) {
      Acc s = 0;
      for (int j = 0; j < C; ++j) s += mix.A[j * C + k] * static_cast<Acc>(h[j * D + i]);
      const Acc v = mix.post[k] * static_cast<Acc>(y[i]) + s;
      if (pre) pre[k * D + i] = v;
      out[k * D + i] = round_bf16(v);
    }
  std::copy(out.begin(), out.end(), h);
}

}  // namespace dsv4::cpu
