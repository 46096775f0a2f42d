// The logprob parts of row_draws (RowDrawDev::partition, top_n, proposed): a row's largest logit and its partition sum
// (lanes/partition_sum.h, the same bits the host computes), its best ids and a proposed id's logit, so the host derives
// its logprobs and top_logprobs exactly (lanes::partition_from, logprob_of, top_logprobs_among).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/kernels/sample/row_draws.cuh"

namespace dsv4::cuda {

// Device scratch bytes logprob_draws needs for n rows of V logits (a multiple of 256).
size_t logprob_draw_scratch_bytes(int64_t n, int64_t V);

// picks[r]'s top_logit, sum_lo / sum_hi, top_count / top_ids / top_logits and proposed_logit for every row r whose
// draws[r] is not whole and asks for them; scratch: logprob_draw_scratch_bytes(n, V) bytes, 256-byte aligned.
cudaError_t logprob_draws(const float* logits, int64_t n, int64_t V, const RowDrawDev* draws, void* scratch,
                          RowPickDev* picks, cudaStream_t s);

}  // namespace dsv4::cuda
