// Launchers of the V4 / 0731 attention kernels (model-spec.md §8): the per-head bf16 query norm,
// the 584-byte KV rows (FP8 e4m3 / UE8M0 per 64 over the NoPE dims, bf16 RoPE dims), the gated
// compressors with position bias (ratio 4 overlapped, larger ratios plain), the Hadamard-rotated
// FP4 indexer, top-k in descending score order and sparse attention over V4 rows. Semantics of
// cpu::attention_layer<float> with cfg.v4(); every output row's arithmetic is independent of the
// other rows of the launch (batch invariance). Activations are float arrays holding bf16 values.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels/attention/attention_kernels.cuh"
#include "core/kv_rows.h"

namespace dsv4::cuda {

// One piece as the V4 kernels of one layer see it (the layer is its own KV source).
struct PieceV4 {
  int64_t start = 0, T = 0, row0 = 0;
  uint8_t* window = nullptr;   // ring [cap, kv_model1_row_bytes(d)]
  RowPages comp;               // compressed rows of kv_model1_row_bytes(d) bytes, row j = position j*ratio
  RowPages ikeys;              // overlap layers: index-key rows of ihd/2 + ihd/32 bytes
  float* proj_kv = nullptr;    // main compressor projections [pcap, w] by slot q % pcap
  float* proj_gate = nullptr;
  float* iproj_kv = nullptr;   // overlap layers: indexer compressor projections [pcap, 2*ihd]
  float* iproj_gate = nullptr;
};

// Bytes of a V4 KV row of d dims with rd bf16 RoPE dims: core's kv_row_bytes(KvRowFormat::model1), usable in kernels.
__host__ __device__ inline int64_t kv_model1_row_bytes(int64_t d, int64_t rd) { return kv_row_bytes(KvRowFormat::model1, d, rd); }

// In place on q [rows * heads, hd]: cpu::head_rms_bf16 (bf16 q^2 summed in order, bf16 mean,
// bf16 + eps, bf16 rsqrt, bf16 product).
cudaError_t v4_head_rms(float* q, int64_t n_heads_total, int64_t hd, float eps, cudaStream_t s);

// In place on x [rows, d] (bf16 values): QDQ into the V4 row format, packed rows [rows, row_v4_bytes]
// written to packed.
cudaError_t v4_pack_rows(float* x, int64_t rows, int64_t d, int64_t rd, uint8_t* packed, cudaStream_t s);

// One V4 compressor over the groups this call completes (emit[e]: group j of piece emit[e].piece,
// whose last token is call row emit[e].row). kp/gp fp32 [rows, w] (this call's projections, w = 2n
// with overlap, else n); rings proj_kv/proj_gate (index_side: iproj_*) [pcap, w]; ape f32 [ratio, w].
// Per group and channel: softmax pooling over the slots (overlap: previous group via channels
// 0..n-1, own via n..2n-1), -> bf16; RMSNorm(norm, eps); RoPE of the tail at j*ratio. Main side:
// packed V4 row written to comp row j. Index side (n = ihd): Hadamard, FP4 / UE8M0-32 row written
// to ikeys row j.
cudaError_t v4_compress(const EmitDev* emit, int64_t n_emit, const PieceV4* pieces, const float* kp, const float* gp,
                        int64_t w, bool overlap, int ratio, int64_t pcap, const float* ape, const float* norm, float eps,
                        const float* freqs, int n_freq, bool index_side, int64_t rd, cudaStream_t s);

// Projection rings after the layer's reads: the last min(T, pcap) rows of every piece, row r to
// slot (start + r - row0) % pcap (index_side: the indexer's rings).
cudaError_t v4_proj_ring_write(const PieceV4* pieces, const int32_t* row_piece, int64_t rows, int64_t pcap,
                               const float* kp, const float* gp, int64_t w, bool index_side, cudaStream_t s);

// Window ring writes: the last min(T, cap) rows of every piece (packed rows of row_bytes).
cudaError_t v4_window_write(const PieceV4* pieces, const int32_t* row_piece, int64_t rows, int64_t cap,
                            const uint8_t* packed, int64_t row_bytes, cudaStream_t s);

// In place on x [n_heads_total, hd] (hd a power of two, multiple of 32): Hadamard rotation
// (Sylvester order, scale hd^-0.5, one bf16 rounding), then FP4 / UE8M0-32 QDQ.
cudaError_t v4_hadamard_fp4(float* x, int64_t n_heads_total, int64_t hd, cudaStream_t s);

// topk[r, 0..k) = the min(k, L_c) rows of highest score (ties to the lower row) in descending
// score order, -1 after; L_c = (pos[r]+1)/ratio; score [rows, stride] (bf16 values). The set is
// topk_rows' (the production selection), then ordered by v4_order_desc; k <= 4096; work:
// topk_work_ints(rows, stride, k) ints (topk_rows' chunk lists; none for short rows).
cudaError_t v4_topk_desc(const float* score, int64_t stride, const int64_t* pos, int64_t rows, int ratio, int64_t k,
                         int32_t* topk, int32_t* work, cudaStream_t s);

// In place on topk [rows, k] (rows ascending, -1 after, as topk_rows leaves them): each row's
// valid entries ordered by (score descending, row ascending), -1 after (bitonic sort in shared
// memory); k <= 4096.
cudaError_t v4_order_desc(const float* score, int64_t stride, int64_t rows, int64_t k, int32_t* topk, cudaStream_t s);

// list[r, t] = t for t < (pos[r]+1)/ratio, else -1 (width entries per row): every visible row.
cudaError_t v4_all_rows(const int64_t* pos, int64_t rows, int ratio, int64_t width, int32_t* list, cudaStream_t s);

// Sparse attention with sinks over [window part of width W (this call's kvn or the V4 ring) ; n_sel
// compressed V4 rows sel[r] (-1 none)], blocks of 64 as cpu::sparse_attend_head, inverse RoPE of
// o's tail at p; o written grouped as sparse_attention's. At d = 128 or 512 with rd = 64 (every
// preset) the V4.1 tensor-core kernel runs it (attn_sparse_tc.cu: bf16 MMAs, batch-invariant);
// with DSV4_ATTN_TC=0, or other shapes, a CUDA-core kernel with the oracle's arithmetic (each
// 64-entry block of keys copied into shared memory as packed rows and decoded there once per
// (head, row): 169 KiB at d = 512). d <= 512.
cudaError_t v4_sparse_attention(const float* q, const float* kvn, const PieceV4* pieces, const int32_t* row_piece,
                                const int64_t* pos, int64_t rows, int64_t H, int64_t d, int64_t rd, int64_t W,
                                int64_t cap, const int32_t* sel, int64_t n_sel, const float* sink, float scale,
                                const float* freqs, int n_freq, int64_t G, float* o, cudaStream_t s);

}  // namespace dsv4::cuda
