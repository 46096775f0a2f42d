// Engram (model-spec.md §3.4): FP8 table rows decoded as a step reads them, and the per-stream gate that
// writes one shared value vector into the residual streams (the hash rows: family/deepseek_v41/engram_hash.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/cpu/linear.h"

namespace dsv4::cpu {

// §3.4(e): row r of an Engram table, row_val[j] = bf16(e4m3 * 2^(s - 127)), exact. table e4m3 [rows, dim],
// scale ue8m0 [rows, dim / 32].
inline void engram_table_row(const TensorView& table, const TensorView& scale, int64_t r, float* out) {
  const int64_t dim = table.dim(1);
  const uint8_t* codes = table.bytes() + r * dim;
  const uint8_t* s = scale.bytes() + r * (dim / 32);
  for (int64_t j = 0; j < dim; ++j) out[j] = e4m3_to_f32(codes[j]) * ue8m0_to_f32(s[j / 32]);
}

// §3.4(f) for `rows` positions: h bf16 [rows, C, D] updated in place; table_rows [rows, R];
// masked[r] forces the gate of row r to 0 (image tokens).
template <typename Acc>
void engram_apply(ThreadPool& pool, const family::LayerWeights& E, int64_t R, const int64_t* table_rows,
                  const uint8_t* masked, int64_t rows, int C, int64_t D, float eps, int act_block,
                  float* h) {
  const int64_t dim = E.engram_table.dim(1);
  Vec u(rows * R * dim);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < R; ++j)
      engram_table_row(E.engram_table, E.engram_table_scale, table_rows[r * R + j], &u[(r * R + j) * dim]);
  const Vec qw = floats(E.engram_q_weight), kw = floats(E.engram_k_weight);
  const int64_t kvn = (C + 1) * D;
  Vec kv(rows * kvn);
  fp8_linear<Acc>(pool, u.data(), rows, E.engram_wkv, kv.data(), act_block);
  const Acc inv_sqrt_d = static_cast<Acc>(1.0 / std::sqrt(static_cast<double>(D)));
  for (int64_t r = 0; r < rows; ++r) {
    const float* key_all = &kv[r * kvn];
    const float* value = key_all + C * D;
    for (int c = 0; c < C; ++c) {
      float* hc = h + (r * C + c) * D;
      const float* key = key_all + c * D;
      const Acc rstd = static_cast<Acc>(1) / std::sqrt(dot<Acc>(hc, hc, D) / static_cast<Acc>(D) + static_cast<Acc>(eps)) *
                       (static_cast<Acc>(1) / std::sqrt(dot<Acc>(key, key, D) / static_cast<Acc>(D) + static_cast<Acc>(eps)));
      Acc l[8] = {};
      for (int64_t i = 0; i < D; ++i) {
        const Acc w = static_cast<Acc>(qw[c * D + i] * kw[c * D + i]);
        l[i & 7] += static_cast<Acc>(hc[i]) * w * static_cast<Acc>(key[i]);
      }
      const Acc sum = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
      const Acc d = sum * rstd * inv_sqrt_d;
      const Acc mag = std::sqrt(std::max(std::fabs(d), static_cast<Acc>(1e-6)));
      Acc g = static_cast<Acc>(1) / (static_cast<Acc>(1) + std::exp(-std::copysign(mag, d)));
      if (masked && masked[r]) g = 0;
      for (int64_t i = 0; i < D; ++i)
        hc[i] = round_bf16(static_cast<Acc>(hc[i]) + g * static_cast<Acc>(value[i]));
    }
  }
}

}  // namespace dsv4::cpu
