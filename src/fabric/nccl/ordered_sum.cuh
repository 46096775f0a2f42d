// The rank-ordered sum kernel of the NCCL reduction: out[i] = ((g[0][i] + g[1][i]) + g[2][i]) + ...
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

namespace dsv4::fabric {

// gathered: device f32 [world, count] (rank-major, as ncclAllGather leaves it); out: device f32 [count].
// Each output element is summed left to right in rank order with no FMA contraction, so every rank computes
// the same bits as a host loop in float.
cudaError_t ordered_sum_f32(const float* gathered, int32_t world, int64_t count, float* out, cudaStream_t stream);

}  // namespace dsv4::fabric
