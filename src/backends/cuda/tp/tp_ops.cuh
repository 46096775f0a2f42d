// Kernels of the tensor-parallel forward (tp_forward.h): the rank's share of the routed pairs and of the
// embedding, and the copies that put gathered rank-major blocks back in the one-GPU layout.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda {

// mine[p] = pair_expert[p] when lo <= pair_expert[p] < hi (an expert this rank holds), else -1 (skipped by
// moe_routed_experts). The pairs keep their order, so the list stays sorted by (expert, row) apart from -1 runs.
cudaError_t tp_own_pairs(const int32_t* pair_expert, int64_t n_pairs, int32_t lo, int32_t hi, int32_t* mine,
                         cudaStream_t s);

// out[p, :] = gathered[pair_expert[p] / per_rank, p, :] for p < n_pairs: each pair's output from the rank that
// holds its expert (gathered f32 [world, n_pairs, D]; a copy, bits unchanged).
cudaError_t tp_pick_pairs(const float* gathered, const int32_t* pair_expert, int64_t n_pairs, int64_t D,
                          int32_t per_rank, float* out, cudaStream_t s);

// out[r, k * cols + j] = gathered[k, r, j]: every rank's column block side by side (gathered f32
// [world, rows, cols] -> out f32 [rows, world * cols]; a copy).
cudaError_t tp_interleave_ranks(const float* gathered, int32_t world, int64_t rows, int64_t cols, float* out,
                                cudaStream_t s);

// out[r, :] = the embedding row of ids[r] (bf16 -> f32, exact) when this rank holds it (slice bf16 [Vl, D] holds
// vocabulary rows [lo, lo + Vl)), else zeros: f32 [rows, D].
cudaError_t tp_embed_local(const uint16_t* slice, const int32_t* ids, int64_t rows, int64_t lo, int64_t Vl, int64_t D,
                           float* out, cudaStream_t s);

// h[r, c, :] = gathered[ids[r] / Vl, r, :] for every stream c, pi[r] = (1, 0, ..., 0): embed_streams over the
// rows of each token's owner (gathered f32 [world, rows, D]; copies, bits unchanged).
cudaError_t tp_embed_pick(const float* gathered, const int32_t* ids, int64_t rows, int64_t Vl, int C, int64_t D,
                          float* h, float* pi, cudaStream_t s);

}  // namespace dsv4::cuda
