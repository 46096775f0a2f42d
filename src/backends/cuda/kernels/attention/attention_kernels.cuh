// Launchers of the CSA2 attention kernels (model-spec.md §3.6): plain device pointers, sizes and a
// stream; each returns the launch's cudaError_t. Activations are float arrays holding bf16 values.
// Every kernel computes each output row with a fixed order of operations that does not depend on
// the other rows of the launch (batch invariance).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels/attention/row_pages.cuh"

namespace dsv4::cuda {

// One piece of the call as one layer's kernels see it.
struct PieceDev {
  int64_t start = 0, T = 0, row0 = 0;
  uint8_t* window = nullptr;       // this layer's ring [cap, window_row]
  RowPages comp;                   // compressed rows of the layer's KV source, comp_row bytes each
  RowPages ikeys;                  // index-key rows of the layer's KV source, index_row bytes each
  float* comp_kv = nullptr;        // ratio-2 KV source projection rings [cap, d]
  float* comp_gate = nullptr;
};

// A group completed in this call: the call row of its last token, its piece and group index j. Graph calls pad
// their lists to a fixed length with entries of row -1, which the kernels skip.
struct EmitDev {
  int32_t row = 0, piece = 0;
  int64_t j = 0;
};

// Compressed main KV row formats (KvRowFormat values).
enum class CompFormat : int32_t { fp8_ue8m0_32 = 0, fp4_e4m3_16 = 1 };

// y[r] = RMSNorm(x[r]; w) (bf16 [n]); with freqs, the last 2*n_freq elements are rotated at pos[r];
// with packed, the row is FP8-QDQ'd (act_quant, blocks of 32), its packed bytes [n + n/32] written
// to packed[r] and its dequantized values to y[r].
cudaError_t norm_rope_rows(const float* x, int64_t rows, int64_t n, const float* w, float eps,
                           const float* freqs, int n_freq, const int64_t* pos, float* y,
                           uint8_t* packed, cudaStream_t s);

// In place on x [rows, heads, hd]: rotate each head's last 2*n_freq elements at pos[r] (inverse:
// conjugate); with fp4_qdq, then FP4/UE8M0-per-32 QDQ of each head (indexer queries).
cudaError_t rope_heads(float* x, int64_t rows, int64_t heads, int64_t hd, const float* freqs, int n_freq,
                       const int64_t* pos, bool inverse, bool fp4_qdq, cudaStream_t s);

// Ring writes after the layer's reads: the last min(T, cap) rows of every piece, row r to slot
// (start + r - row0) % cap: packed window rows (row_bytes each) and, when kp is given, the fp32
// compressor projections kp/gp [rows, d] into the projection rings.
cudaError_t ring_write(const PieceDev* pieces, const int32_t* row_piece, int64_t rows, int64_t cap,
                       const uint8_t* packed, int64_t row_bytes, const float* kp, const float* gp, int64_t d,
                       cudaStream_t s);

// Ratio-2 gated pooling of the emitted groups: latent = bf16(sum_t k_t * softmax_t(g_t)) per
// channel over the group's two positions (this call's kp/gp or the piece's rings), then
// RMSNorm(latent; norm) -> out [n_emit, d].
cudaError_t compress_pool2(const EmitDev* emit, int64_t n_emit, const PieceDev* pieces, const float* kp,
                           const float* gp, int64_t cap, int64_t d, const float* norm, float eps, float* out,
                           cudaStream_t s);

// Ratio 1: out[e] = RMSNorm(lat[emit[e].row]; norm).
cudaError_t compress_norm1(const EmitDev* emit, int64_t n_emit, const float* lat, int64_t d,
                           const float* norm, float eps, float* out, cudaStream_t s);

// Writes group e's rows j = emit[e].j of the piece's KV source caches: the index key
// RMSNorm(ik[e]; ik_norm), RoPE at j*ratio, FP4/UE8M0-32 packed (ihd/2 + ihd/32 B); the compressed
// row latent[e] RoPE'd at j*ratio and packed in `fmt`.
cudaError_t emit_rows(const EmitDev* emit, int64_t n_emit, const PieceDev* pieces, const float* latent,
                      int64_t d, const float* ik, int64_t ihd, const float* ik_norm, float eps,
                      const float* freqs, int n_freq, int ratio, CompFormat fmt, cudaStream_t s);

// Index scores: for row r and t < L_c(r) = (pos[r]+1)/ratio,
// score = bf16(sum_h bf16(relu(bf16(qi_h . k_t)) * bf16(wt_h * wscale))) against the piece's
// index-key rows; score [rows, stride]. qi [rows, IH, ihd] (FP4-QDQ'd), wt [rows, IH] (bf16).
// Two kernels give the same bits (attn_index.cu, attn_index_mma.cu): group dots by dp4a, one (row, key) per thread
// (few rows), or by int8 tensor-core MMAs over tiles of keys shared by 8 rows (IH a multiple of 32).
cudaError_t index_scores(const float* qi, const float* wt, float wscale, const PieceDev* pieces,
                         const int32_t* row_piece, const int64_t* pos, int64_t rows, int64_t IH, int64_t ihd,
                         int ratio, float* score, int64_t stride, int64_t max_lc, cudaStream_t s);
// Which kernel index_scores runs: automatic (by row count and shape) unless the environment variable
// DSV4_INDEX_MMA is "0" (dp4a always) or "1" (tensor cores wherever the shape allows) when first
// asked; the setter overrides it (tests and benches compare the two).
enum class IndexScoresImpl : int { automatic = 0, dp4a = 1, tensor_core = 2 };
IndexScoresImpl index_scores_impl();
void set_index_scores_impl(IndexScoresImpl impl);

// Candidate source: cand[r, t] for t < L_c = rows of the best `topk_blocks` blocks of `block` rows
// (block value = max score, the block of row L_c-1 forced in, ties to the lower block, blocks at
// -inf dropped). stride >= every row's L_c; work: candidate_work_elems(rows, stride, block) block keys.
cudaError_t candidate_rows(float* score, int64_t stride, const int64_t* pos, int64_t rows, int ratio,
                           int64_t topk_blocks, int64_t block, uint8_t* cand, int64_t cand_stride, uint16_t* work,
                           cudaStream_t s);
int64_t candidate_work_elems(int64_t rows, int64_t max_lc, int64_t block);
// Users of candidates: score[r, t] = -inf where !cand[r, t].
cudaError_t apply_candidates(float* score, int64_t stride, const int64_t* pos, int64_t rows, int ratio,
                             const uint8_t* cand, int64_t cand_stride, int64_t max_lc, cudaStream_t s);

// topk[r] = the min(k, L_c) rows of highest score (ties to the lower row), ascending, then -1 up to k.
// With mask (candidate users), rows t with !mask[m * mask_stride + t] count as -inf (the scores are
// not modified), m = mask_row[r] when given (bounded replay: the row's place among the candidate
// source's rows), else r. stride >= every row's L_c; work: topk_work_ints(rows, stride, k) ints (none
// for short rows).
cudaError_t topk_rows(const float* score, int64_t stride, const int64_t* pos, int64_t rows, int ratio,
                      const uint8_t* mask, int64_t mask_stride, int64_t k, int32_t* topk, int32_t* work,
                      cudaStream_t s, const int32_t* mask_row = nullptr);
int64_t topk_work_ints(int64_t rows, int64_t max_lc, int64_t k);

// Sparse attention with sinks of every (row, head): key list = [window part of width W: positions
// max(0,p-W+1)..p from entry 0 (this call's keys kvn [rows, d] or the ring), -1 after ;
// n_sel compressed rows topk[r] (-1 = none)], online softmax in blocks of 64 as
// cpu::sparse_attend_head, then the inverse RoPE of o's tail at p. q [rows, H, d]; o written
// grouped: o[g][r][hh*d + i] for head h = g*(H/G) + hh. The tensor-core implementation (default)
// computes q.k and P.V by bf16 MMAs with fp32 accumulation (the reference kernel's GEMMs; the
// oracle's sequential fp32 sums differ in order: agreement to a tolerance, not bits); the CUDA-core
// implementation (DSV4_ATTN_TC=0) repeats the oracle's operations in its order, bit for bit. Both
// give each row bits that depend on that row alone. work: sparse_attention_work_floats(rows, H, W,
// n_sel) floats (the CUDA-core need: none for window-only calls and calls of more than 64 rows).
// H a multiple of 4, d in {64, 128, 256, 512}.
cudaError_t sparse_attention(const float* q, const float* kvn, const PieceDev* pieces, const int32_t* row_piece,
                             const int64_t* pos, int64_t rows, int64_t H, int64_t d, int64_t W, int64_t cap,
                             const int32_t* topk, int64_t n_sel, CompFormat fmt, const float* sink, float scale,
                             const float* freqs, int n_freq, int64_t G, float* o, float* work, cudaStream_t s);
int64_t sparse_attention_work_floats(int64_t rows, int64_t H, int64_t W, int64_t n_sel);
// Which implementation sparse_attention runs: tensor_core unless the environment variable
// DSV4_ATTN_TC is "0" when first asked; the setter overrides it (benches and tests compare the two).
enum class SparseAttentionImpl : int { tensor_core = 0, cuda_core = 1 };
SparseAttentionImpl sparse_attention_impl();
void set_sparse_attention_impl(SparseAttentionImpl impl);

// z [rows, G*O] from zt [G, rows, O].
cudaError_t ungroup_rows(const float* zt, int64_t rows, int64_t G, int64_t O, float* z, cudaStream_t s);

}  // namespace dsv4::cuda
