// The truncated rows of row_draws (kDrawTruncated: top-k / top-p / min-p): the candidate rule of
// lanes/truncated_candidates.h on the device. Called by row_draws after its slice pass, which leaves each truncated
// row's first id of largest logit and its irregularity (a NaN or +inf logit) in `parts`.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/kernels/sample/row_draws.cuh"

namespace dsv4::cuda {

// Device scratch bytes truncated_draws needs for n rows of V logits (a multiple of 256).
size_t truncated_draw_scratch_bytes(int64_t n, int64_t V);

// picks[r] (count, ids, logits, irregular, uncertain) of every truncated row r, the ids outside its mask (masks +
// draws[r].mask, when >= 0) read as -inf; parts: the slice pass's
// [n, row_draw_slices(V)]; scratch: truncated_draw_scratch_bytes(n, V) bytes, 256-byte aligned.
cudaError_t truncated_draws(const float* logits, int64_t n, int64_t V, const RowDrawDev* draws, const uint64_t* masks,
                            const DrawPartDev* parts, void* scratch, RowPickDev* picks, cudaStream_t s);

}  // namespace dsv4::cuda
