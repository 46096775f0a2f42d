// Routed experts of one MoE layer on CUDA: every (row, expert) pair in one launch chain, each CTA
// streaming one expert's FP4 weights once for all the rows routed to it; batch-invariant.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/model/weights.h"

namespace dsv4::cuda {

// Pairs sorted by (expert, row); for pair p with r = pair_row[p], e = pair_expert[p]:
//   a = fp4_linear(x[r], w1[e]), u = fp4_linear(x[r], w3[e])           (bf16 [I] each)
//   h = swiglu_clamped(a, u, pair_weight[p], swiglu_limit)               (bf16 [I], cpu::swiglu_clamped)
//   out[p] = fp4_linear(h, w2[e])                                        (bf16 [D])
// exactly as cpu::moe_forward<float> computes each expert's rows (the combine over a row's experts
// is the caller's). x: float [rows, D] (bf16 values); w1/w3/w2: device arrays [E] of views
// ([I, D], [I, D], [D, I]); scratch: >= n_pairs * 3 * I floats; out: float [n_pairs, D].
// Each pair's arithmetic is that of fp4_linear on its row alone: independent of the other pairs.
// Pairs with pair_expert < 0 are skipped (their out rows are left as they were): a tensor-parallel rank
// marks so the pairs of experts another rank holds (tp_forward.h).
// Refused with cudaErrorInvalidValue: act_block not 32, 64 or 128, D or I not a multiple of it, x or
// scratch not 16-byte aligned. Returns the last launch's cudaGetLastError().
// From `tile_pairs` pairs on, the pairs run on the many-row GEMM (lowp_gemm.cuh; or the 64 x 64 prefill
// tiles under set_lowp_gemm(false)), weights read once per row tile of 32 to 128 pairs of an expert;
// below on the row kernels (once per 8): speed only, both give every pair the same bits.
// The default, 8 pairs per expert of V4.1's 384 on average, keeps decode and verify calls (at most a few
// pairs per expert, where a tile of mostly empty rows costs far more than it saves: a 48-row verify took
// 2x as long on the tiles) on the row kernels and prefill chunks of 512 rows and more on the tiles.
inline constexpr int64_t kMoeTilePairs = 3072;
cudaError_t moe_routed_experts(const float* x, const int32_t* pair_row, const int32_t* pair_expert,
                               const float* pair_weight, int64_t n_pairs, const Fp4View* w1, const Fp4View* w3,
                               const Fp4View* w2, int64_t D, int64_t I, int act_block, float swiglu_limit,
                               float* scratch, float* out, cudaStream_t s, int64_t tile_pairs = kMoeTilePairs);

}  // namespace dsv4::cuda
