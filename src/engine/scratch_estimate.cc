// Scratch arithmetic of one rank's forward (see scratch_estimate.h for the CUDA sources it mirrors).
#include "engine/scratch_estimate.h"

#include <algorithm>
#include <set>

#include "engine/byte_size.h"
#include "family/deepseek_v41/layer_plan.h"

namespace dsv4::engine {

namespace {

int64_t align256(int64_t n) { return (n + 255) / 256 * 256; }
int64_t f32s(int64_t n) { return align256(n * 4); }

// Sizes of the device records the attention call tables hold (attention_kernels.cuh PieceDev: 3 int64, 3 pointers
// and 2 RowPages of 24 B (a pointer, an int64, an int32 and padding); attn_v4.cuh PieceV4: 3 int64, 5 pointers and 2
// RowPages; EmitDev: 2 int32 + 1 int64).
constexpr int64_t kPieceDev = 96, kPieceV4 = 112, kEmitDev = 16;
// attn_topk.cu: rows of more than 8,192 scores take the two-level top-k with 16 chunks; attn_sparse*.cu:
// calls of at most 64 rows with selected rows run the two-pass kernels with a [64, H, W + k] score buffer.
constexpr int64_t kTopkDirectMax = 8192, kTopkChunks = 16, kTwoPassRows = 64;

struct Dims {
  int64_t C, D, V, H, d, Q, GO, I, E, K, W, topk, ihd, IH, cand_block, layers;
  int64_t engram_layers, engram_R, engram_dim, taps;
  bool v4;
};

Dims dims(const family::Config& c, int32_t tp) {
  Dims x{};
  x.v4 = c.variant == family::Variant::v4;
  x.C = c.hc_mult;
  x.D = c.hidden_size;
  x.V = c.vocab_size;
  x.H = c.num_attention_heads / tp;
  x.d = c.head_dim;
  x.Q = c.q_lora_rank;
  x.GO = int64_t{c.o_groups / tp} * c.o_lora_rank;
  x.I = c.moe_intermediate_size;
  x.E = std::max(c.n_routed_experts, c.dspark_n_routed_experts);
  x.K = std::max(c.num_experts_per_tok, c.dspark_num_experts_per_tok);
  x.W = c.sliding_window;
  x.topk = c.index_topk;
  x.ihd = c.index_head_dim;
  x.IH = c.index_n_heads;
  x.cand_block = c.candidate_block_size;
  x.layers = c.num_hidden_layers;
  x.engram_layers = static_cast<int64_t>(c.engram_layer_ids.size());
  x.engram_R = c.has_engram() ? int64_t{c.engram_num_orders()} * c.engram_n_heads : 0;
  x.engram_dim = c.engram_head_dim;
  // Taps are buffered for a drafter the plan runs (none on V4-0731: family::ModelPlan::dspark_stages).
  x.taps = static_cast<int64_t>(family::build_plan(c).dspark_target_layers.size());
  return x;
}

int64_t forward_bytes(const Dims& x, int64_t rows) {
  const int64_t nm = x.C * (x.C + 2), R = x.engram_R;
  int64_t f = rows * (x.C * x.D + x.C) + rows * 4;           // streams h, pi, ids, pos
  f += rows * x.taps * x.D + 4 * rows * x.D;                   // taps, DSpark main rows and keys
  f += rows * x.engram_layers * R * 2;                         // Engram table rows
  int64_t layer = 3 * rows * x.D + 3 * rows * nm;              // block x, xn, y, mixes
  const int64_t moe =
      rows * x.E + 7 * rows * x.K + rows * x.K * x.D + rows * x.K * 3 * x.I + 3 * rows * x.I + rows * x.D;
  const int64_t engram = rows * R * x.engram_dim + rows * (x.C + 1) * x.D;
  layer += std::max(moe, engram);
  const int64_t head = rows * (x.C * x.D + x.C + 2 * x.D + x.V + 2);
  return (f + std::max(layer, head)) * 4 + 64 * kMiB;
}

int64_t attention_bytes(const family::Config& c, const Dims& x, int64_t rows, int64_t max_pos) {
  const int64_t lc = max_pos + 1;
  const int64_t sparse_work =
      rows <= kTwoPassRows && x.topk > 0 ? std::min(rows, kTwoPassRows) * x.H * (x.W + x.topk) : 0;
  const int64_t topk_work = lc > kTopkDirectMax ? rows * kTopkChunks * x.topk : 0;
  const int64_t cand_work = x.cand_block > 0 ? rows * ((lc + x.cand_block - 1) / x.cand_block) : 0;
  const int64_t call = align256(kPieceDev * x.layers * rows) + 3 * align256(16 * rows) + f32s(rows * x.topk) +
                       align256(rows * lc);
  const int64_t layer = 2 * f32s(rows * x.Q) + 2 * f32s(rows * x.H * x.d) + 2 * f32s(rows * x.d) +
                        align256(rows * (x.d + x.d / 32)) + 2 * f32s(rows * x.GO) + 2 * f32s(rows * x.d) +
                        f32s(rows * x.d) + f32s(rows * x.ihd) + f32s(rows * x.IH * x.ihd) + f32s(rows * x.IH) +
                        f32s(rows * lc) + f32s(sparse_work) + f32s(topk_work) + f32s(cand_work) +
                        f32s(rows * x.D) + f32s(rows * x.topk) + 20 * 256;  // bounded replay: kept rows' x, top-k
  int64_t v4 = 0;
  if (x.v4) {
    std::set<int32_t> ratios;
    int64_t visible = 0;  // widest "every visible row" list: layers with a compressor and no indexer
    for (int32_t l = 0; l < c.num_hidden_layers; ++l) {
      const int32_t r = c.compress_ratios[static_cast<size_t>(l)];
      if (r <= 0) continue;
      ratios.insert(r);
      if (r != 4) visible = std::max(visible, (max_pos + 1) / r);
    }
    const int64_t nr = static_cast<int64_t>(ratios.size());
    const int64_t tables = rows * (x.layers * (kPieceV4 + kPieceDev) + 4 + nr * kEmitDev) + (4 + nr) * 256;
    v4 = 4 * (4 * rows * x.d + 4 * rows * x.ihd + rows * visible) + rows * (2 * x.d + 64) + tables + 16 * 256;
  }
  return call + layer + v4;
}

int64_t drafter_bytes(const family::Config& c, const Dims& x) {
  const int64_t B = c.dspark_block_size, Hd = x.H * x.d;
  int64_t f = B * (x.C * x.D + x.C) + 8 * B * x.D + 4 * B * Hd + 2 * B * x.Q + B * x.GO;
  f += B * x.E + 8 * B * x.K + B * x.K * (x.D + 3 * x.I) + 3 * B * x.I + B * (x.C * x.D + x.V * 2) + 4 * x.W;
  f += 3 * x.V + 2 * (x.D + c.dspark_markov_rank) + 64 * B * x.C * (x.C + 2);
  return f * 4 + 16 * kMiB;
}

int64_t tensor_parallel_bytes(const Dims& x, int32_t tp, int64_t rows) {
  if (tp <= 1) return 0;
  const int64_t P = rows * x.K;
  return 4 * (rows * x.V + (tp + 1) * P * x.D + P + 2 * tp * rows * x.GO + (tp + 1) * rows * x.D) + 4 * kMiB;
}

}  // namespace

ScratchEstimate estimate_scratch(const family::Config& c, int32_t tp, int64_t rows, int64_t max_context, bool exl3) {
  const Dims x = dims(c, std::max(tp, 1));
  ScratchEstimate s;
  s.forward = forward_bytes(x, rows);
  s.attention = attention_bytes(c, x, rows, max_context);
  s.drafter = drafter_bytes(c, x);
  s.tensor_parallel = tensor_parallel_bytes(x, tp, rows);
  // Call metadata: the attention's piece tables; bounded replay's row tables (per layer and row: position 8 B,
  // piece 4 B, input row 8 B, top-k row 8 B, candidate row 4 B) and the tapped and logit rows' places (8 B).
  s.other = align256(rows * x.layers * (x.v4 ? kPieceV4 + kPieceDev : kPieceDev)) + rows * x.layers * 32 +
            (x.taps + 1) * rows * 8 + (exl3 ? 2 * 64 * kMiB : 0);
  // The many-row GEMM of the FP8 / FP4 linears (calls of more than 16 rows): a launch's quantized rows, at most
  // 192 MiB, from the device's stream-ordered pool, which keeps up to 256 MiB between launches (lowp_gemm.cu).
  if (!exl3 && rows > 16) s.other += 256 * kMiB;
  return s;
}

}  // namespace dsv4::engine
