// The vision tower's ops (model-spec.md §3.10) with the reference's rounding points, templated on the
// accumulator (float = ref32, double = ref64): 2-D RoPE, bidirectional SDPA, SwiGLU, erf GELU, bf16 residual
// add, the aligner's unfold (the linears are linear.h's bf16_linear with bias). Activations are bf16 values
// held in float arrays; every output element is computed by one thread in a fixed order, so results do not
// depend on the thread count or on other rows.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/cpu/numerics.h"
#include "backends/cpu/stored.h"
#include "core/thread_pool.h"

namespace dsv4::cpu::vision {

// The 2-D RoPE table of a grid_h x grid_w patch grid for heads of 64 (model-spec.md §3.10): for patch
// p = row·grid_w + col and i in 0..31, angle fp32(i < 16 ? row : col) · inv_freq[i mod 16] with
// inv_freq_k = fp32(1 / fp32(theta^(k/16))); cos and sin in fp32, [n, 32] each.
struct Rope2d {
  std::vector<float> cos, sin;
};
inline Rope2d rope_2d_table(int64_t grid_h, int64_t grid_w, double theta) {
  float inv[16];
  for (int k = 0; k < 16; ++k) inv[k] = 1.0f / static_cast<float>(std::pow(theta, k / 16.0));
  Rope2d t;
  t.cos.resize(static_cast<size_t>(grid_h * grid_w * 32));
  t.sin.resize(t.cos.size());
  for (int64_t p = 0; p < grid_h * grid_w; ++p)
    for (int i = 0; i < 32; ++i) {
      const float pos = static_cast<float>(i < 16 ? p / grid_w : p % grid_w);
      const float angle = pos * inv[i % 16];
      t.cos[p * 32 + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      t.sin[p * 32 + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  return t;
}

// Rotates one head of 64 in place (half-split pairing: element i with element i + 32, angle i):
// x_i' = x_i·c - x_{i+32}·s, x_{i+32}' = x_{i+32}·c + x_i·s, each product and sum in Acc, -> bf16.
template <typename Acc>
inline void rope_2d_head(float* x, const float* c, const float* s) {
  for (int i = 0; i < 32; ++i) {
    const Acc a = x[i], b = x[i + 32], ci = c[i], si = s[i];
    const Acc p = a * ci, q = b * si, r = b * ci, u = a * si;
    x[i] = round_bf16(p - q);
    x[i + 32] = round_bf16(r + u);
  }
}

// Bidirectional attention of one image, every head of 64 over every patch (no mask). q, k, v bf16
// [n, H, 64]; o bf16 [n, H·64]. torch's SDPA math path (the reference's 3-D inputs take no fused kernel)
// upcasts bf16 to fp32: q and k each times sqrt(1/8) (the scale rounded to Acc), logits q·k, softmax
// exp(l - max) / sum, o = P·v, all in Acc; one rounding of o to bf16.
template <typename Acc>
void attention(ThreadPool& pool, const float* q, const float* k, const float* v, int64_t n, int64_t H, float* o) {
  constexpr int64_t d = 64;
  const Acc scale = static_cast<Acc>(std::sqrt(0.125));
  // Keys scaled, and values, per head contiguous: [H][n][64] in Acc.
  std::vector<Acc> ks(static_cast<size_t>(H * n * d)), vs(ks.size());
  pool.parallel_for(H * n, [&](int64_t a, int64_t b) {
    for (int64_t hj = a; hj < b; ++hj) {
      const int64_t h = hj / n, j = hj % n;
      for (int64_t e = 0; e < d; ++e) {
        ks[hj * d + e] = static_cast<Acc>(k[(j * H + h) * d + e]) * scale;
        vs[hj * d + e] = static_cast<Acc>(v[(j * H + h) * d + e]);
      }
    }
  }, 64);
  pool.parallel_for(H * n, [&](int64_t a, int64_t b) {
    std::vector<Acc> l(static_cast<size_t>(n));
    Acc qs[d], acc[d];
    for (int64_t hi = a; hi < b; ++hi) {
      const int64_t h = hi / n, i = hi % n;
      for (int64_t e = 0; e < d; ++e) qs[e] = static_cast<Acc>(q[(i * H + h) * d + e]) * scale;
      const Acc* kh = &ks[h * n * d];
      const Acc* vh = &vs[h * n * d];
      Acc mx = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        Acc s[8] = {};
        for (int64_t e = 0; e < d; e += 8)
          for (int t = 0; t < 8; ++t) s[t] += qs[e + t] * kh[j * d + e + t];
        l[j] = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
        mx = std::max(mx, l[j]);
      }
      Acc sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += (l[j] = std::exp(l[j] - mx));
      std::fill(acc, acc + d, Acc{0});
      for (int64_t j = 0; j < n; ++j) {
        const Acc p = l[j] / sum;
        for (int64_t e = 0; e < d; ++e) acc[e] += p * vh[j * d + e];
      }
      for (int64_t e = 0; e < d; ++e) o[(i * H + h) * d + e] = round_bf16(acc[e]);
    }
  }, 16);
}

// SwiGLU of the MLP: g = bf16 rows [n, 2I] (gate | up); m = bf16(bf16(silu(gate)) · up) [n, I], with
// silu(x) = x / (1 + exp(-x)) in Acc (torch's bf16 SiLU and bf16 product each round once).
template <typename Acc>
void swiglu(ThreadPool& pool, const float* g, int64_t n, int64_t I, float* m) {
  pool.parallel_for(n, [&](int64_t a, int64_t b) {
    for (int64_t r = a; r < b; ++r)
      for (int64_t i = 0; i < I; ++i) {
        const Acc x = g[r * 2 * I + i];
        const Acc act = round_bf16(x / (Acc{1} + std::exp(-x)));
        m[r * I + i] = round_bf16(act * static_cast<Acc>(g[r * 2 * I + I + i]));
      }
  }, 16);
}

// Exact GELU (erf form) in place: bf16(x·0.5·(1 + erf(x·sqrt(1/2)))), evaluated in Acc in that order.
template <typename Acc>
void gelu(ThreadPool& pool, float* x, int64_t count) {
  const Acc r = static_cast<Acc>(0.70710678118654752440);
  pool.parallel_for(count, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) {
      const Acc v = x[i];
      x[i] = round_bf16((v * Acc{0.5}) * (Acc{1} + std::erf(v * r)));
    }
  }, 4096);
}

// h = bf16(h + y), elementwise (torch's bf16 add: the sum in Acc, one rounding).
template <typename Acc>
void add_bf16(float* h, const float* y, int64_t count) {
  for (int64_t i = 0; i < count; ++i) h[i] = round_bf16(static_cast<Acc>(h[i]) + static_cast<Acc>(y[i]));
}

// The aligner's input: x bf16 [gh, gw, V] (the ViT output, row-major patches) zero-padded at the bottom and
// right to multiples of r, one row per r x r block in row-major block order, feature c·r² + r·kh + kw
// (F.unfold's order); [ceil(gh/r)·ceil(gw/r), V·r²].
inline Vec unfold_blocks(const float* x, int64_t gh, int64_t gw, int64_t V, int32_t r) {
  const int64_t bh = (gh + r - 1) / r, bw = (gw + r - 1) / r, F = V * r * r;
  Vec u(static_cast<size_t>(bh * bw * F), 0.0f);
  for (int64_t bi = 0; bi < bh; ++bi)
    for (int64_t bj = 0; bj < bw; ++bj)
      for (int32_t kh = 0; kh < r; ++kh)
        for (int32_t kw = 0; kw < r; ++kw) {
          const int64_t i = bi * r + kh, j = bj * r + kw;
          if (i >= gh || j >= gw) continue;  // padding stays zero
          float* row = &u[(bi * bw + bj) * F];
          for (int64_t c = 0; c < V; ++c) row[c * r * r + kh * r + kw] = x[(i * gw + j) * V + c];
        }
  return u;
}

}  // namespace dsv4::cpu::vision
