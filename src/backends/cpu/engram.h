// Engram (model-spec.md §3.4): n-gram hash rows from the compressed-id history, FP8 table row
// decode, and the per-stream gate that writes one shared value vector into the residual streams.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/cpu/linear.h"

namespace dsv4::cpu {

// Hash layout of one Engram layer: primes and row offsets per (order n = 2..N, head), in
// (order, head) order, and the N odd multipliers.
struct EngramLayout {
  int max_ngram = 4;
  int heads = 8;
  std::vector<int64_t> primes;   // [(N-1) * heads]
  std::vector<int64_t> offsets;  // [(N-1) * heads]
  std::vector<int64_t> multipliers;  // [N]
  int64_t rows() const { return offsets.empty() ? 0 : offsets.back() + primes.back(); }
};

// §3.4(b): primes strictly above vocab-1, one global `seen` set over all layers, restarting
// from vocab-1 for every (layer, order). Returns one prime list per layer.
std::vector<std::vector<int64_t>> engram_primes(int64_t engram_vocab_size, int n_layers,
                                                int max_ngram, int heads);

// §3.4(d): the (N-1)*heads table rows of position p of a history c (compressed ids, -1 = DEAD).
void engram_hash_rows(const EngramLayout& L, const int64_t* c, int64_t p, int64_t pad, int64_t* rows);

// The Engram table of one layer: e4m3 [rows, dim] with one ue8m0 scale per 32 columns.
struct EngramTable {
  int64_t rows = 0;
  int dim = 256;
  std::vector<uint8_t> codes;   // [rows, dim]
  std::vector<uint8_t> scales;  // [rows, dim / 32]
  // §3.4(e): row_val[j] = bf16(e4m3 * 2^(s - 127)), exact.
  void decode_row(int64_t r, float* out) const {
    for (int j = 0; j < dim; ++j)
      out[j] = e4m3_to_f32(codes[r * dim + j]) * ue8m0_to_f32(scales[r * (dim / 32) + j / 32]);
  }
};

struct EngramWeights {
  EngramLayout layout;
  EngramTable table;
  Fp8Weight wkv;                 // [(C+1)*D, rows_per_pos * dim]
  std::vector<float> q_weight;   // bf16 [C, D]
  std::vector<float> k_weight;   // bf16 [C, D]
};

// §3.4(f) for `rows` positions: h bf16 [rows, C, D] updated in place; table_rows [rows, R];
// masked[r] forces the gate of row r to 0 (image tokens).
template <typename Acc>
void engram_apply(ThreadPool& pool, const EngramWeights& E, const int64_t* table_rows,
                  const uint8_t* masked, int64_t rows, int C, int64_t D, float eps, int act_block,
                  float* h) {
  const int64_t R = static_cast<int64_t>(E.layout.primes.size()), dim = E.table.dim;
  Vec u(rows * R * dim);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < R; ++j) E.table.decode_row(table_rows[r * R + j], &u[(r * R + j) * dim]);
  const int64_t kvn = (C + 1) * D;
  Vec kv(rows * kvn);
  fp8_linear<Acc>(pool, u.data(), rows, E.wkv, kv.data(), act_block);
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
        const Acc w = static_cast<Acc>(E.q_weight[c * D + i] * E.k_weight[c * D + i]);
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
