// Mixture of experts (model-spec.md §3.7): sqrt-softplus router with bias, top-k, normalised
// weights x route_scale, clamped SwiGLU experts (FP4) and shared expert (FP8), ascending combine.
#pragma once

#include <algorithm>
#include <cstring>
#include <cmath>
#include <numeric>
#include <vector>

#include "backends/cpu/linear.h"
#include "family/deepseek_v41/layer_plan.h"

namespace dsv4::cpu {

// torch.nn.functional.softplus (beta 1, threshold 20): x itself above the threshold.
template <typename Acc>
inline Acc softplus(Acc x) { return x > static_cast<Acc>(20) ? x : std::log1p(std::exp(x)); }

// Indices of the k largest values, ties broken by the lower index, in descending value order.
template <typename T>
std::vector<int> topk_desc(const T* v, int n, int k) {
  std::vector<int> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) {
    return v[a] > v[b] || (v[a] == v[b] && a < b);
  });
  idx.resize(k);
  return idx;
}

// Clamped SwiGLU hidden: v = w * silu(min(a, L)) * clamp(u, -L, L), all in Acc, -> bf16.
template <typename Acc>
void swiglu_clamped(const float* a, const float* u, int64_t n, Acc weight, float limit, float* v) {
  const Acc L = limit;
  for (int64_t i = 0; i < n; ++i) {
    Acc g = a[i], up = u[i];
    if (limit > 0) { up = std::min(std::max(up, -L), L); g = std::min(g, L); }
    const Acc s = g / (static_cast<Acc>(1) + std::exp(-g));
    v[i] = round_bf16(weight * (s * up));
  }
}

// y[rows, D] = MoE(x[rows, D]) with K experts per row; image[r] selects bias_vl for row r (may be null);
// ids[r] is the row's token (V4 hash-routed layers take their experts from tid2eid[ids[r]], in table order).
template <typename Acc>
void moe_forward(ThreadPool& pool, const family::LayerWeights& W, int K, const family::ModelPlan& cfg, const float* x,
                 const uint8_t* image, const int32_t* ids, int64_t rows, float* y) {
  const int64_t D = cfg.dim, E = W.gate_weight.out(), I = cfg.moe_inter;
  const Vec bias = floats(W.gate_bias), bias_vl = floats(W.gate_bias_vl);
  std::vector<Acc> xa(rows * D), logits(rows * E);
  for (int64_t i = 0; i < rows * D; ++i) xa[i] = x[i];
  f32_linear<Acc>(pool, xa.data(), rows, W.gate_weight, logits.data());
  // Routing per row; then each expert processes its rows, results kept per (row, slot).
  std::vector<std::vector<int>> sel(rows);
  std::vector<std::vector<Acc>> wts(rows);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<Acc> s(E), biased(E);
    for (int64_t e = 0; e < E; ++e) s[e] = std::sqrt(softplus<Acc>(logits[r * E + e]));
    if (family::present(W.tid2eid)) {  // ids checked in [0, E) when the model was opened
      sel[r].resize(K);
      for (int j = 0; j < K; ++j) {
        int64_t e;
        std::memcpy(&e, W.tid2eid.bytes() + 8 * (static_cast<int64_t>(ids[r]) * K + j), 8);
        sel[r][j] = static_cast<int>(e);
      }
    } else {
      const Vec& b = (image && image[r] && !bias_vl.empty()) ? bias_vl : bias;
      for (int64_t e = 0; e < E; ++e) biased[e] = s[e] + static_cast<Acc>(b[e]);
      sel[r] = topk_desc(biased.data(), static_cast<int>(E), K);
    }
    Acc sum = 0;
    for (int e : sel[r]) sum += s[e];
    for (int e : sel[r]) {
      Acc w = s[e];
      // V4.1: w / (sum + 1e-20) when K > 1; V4: w / sum always (router_eps 0).
      if (K > 1 || cfg.route_norm_always) w = w / (sum + static_cast<Acc>(cfg.router_eps));
      wts[r].push_back(w * static_cast<Acc>(cfg.route_scale));
    }
  }
  std::vector<Acc> acc(rows * D, 0);
  Vec xr, a, u, v, out;
  for (int64_t e = 0; e < E; ++e) {
    std::vector<int64_t> rr;
    std::vector<Acc> ww;
    for (int64_t r = 0; r < rows; ++r)
      for (int j = 0; j < K; ++j)
        if (sel[r][j] == e) { rr.push_back(r); ww.push_back(wts[r][j]); }
    if (rr.empty()) continue;
    const int64_t n = static_cast<int64_t>(rr.size());
    xr.resize(n * D); a.resize(n * I); u.resize(n * I); v.resize(n * I); out.resize(n * D);
    for (int64_t i = 0; i < n; ++i) std::copy(x + rr[i] * D, x + (rr[i] + 1) * D, &xr[i * D]);
    const family::Expert& X = W.experts[e];
    fp4_linear<Acc>(pool, xr.data(), n, X.w1, a.data(), cfg.act_block);
    fp4_linear<Acc>(pool, xr.data(), n, X.w3, u.data(), cfg.act_block);
    for (int64_t i = 0; i < n; ++i)
      swiglu_clamped<Acc>(&a[i * I], &u[i * I], I, ww[i], cfg.swiglu_limit, &v[i * I]);
    fp4_linear<Acc>(pool, v.data(), n, X.w2, out.data(), cfg.act_block);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t d = 0; d < D; ++d) acc[rr[i] * D + d] += static_cast<Acc>(out[i * D + d]);
  }
  // Shared expert: same SwiGLU (with the clamp unless shared_clamp is off), no routing weight.
  a.resize(rows * I); u.resize(rows * I); v.resize(rows * I); out.resize(rows * D);
  fp8_linear<Acc>(pool, x, rows, W.shared_w1, a.data(), cfg.act_block);
  fp8_linear<Acc>(pool, x, rows, W.shared_w3, u.data(), cfg.act_block);
  for (int64_t r = 0; r < rows; ++r)
    swiglu_clamped<Acc>(&a[r * I], &u[r * I], I, static_cast<Acc>(1), cfg.shared_clamp ? cfg.swiglu_limit : 0.0f,
                        &v[r * I]);
  fp8_linear<Acc>(pool, v.data(), rows, W.shared_w2, out.data(), cfg.act_block);
  for (int64_t i = 0; i < rows * D; ++i) y[i] = round_bf16(acc[i] + static_cast<Acc>(out[i]));
}

}  // namespace dsv4::cpu
