// The rank-ordered sum kernel (see ordered_sum.cuh).
#include "fabric/nccl/ordered_sum.cuh"

namespace dsv4::fabric {
namespace {

__global__ void ordered_sum_kernel(const float* __restrict__ gathered, int32_t world, int64_t count,
                                   float* __restrict__ out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  float acc = gathered[i];
  for (int32_t r = 1; r < world; ++r) acc = __fadd_rn(acc, gathered[static_cast<int64_t>(r) * count + i]);
  out[i] = acc;
}

}  // namespace

cudaError_t ordered_sum_f32(const float* gathered, int32_t world, int64_t count, float* out, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  const int threads = 256;
  const int64_t blocks = (count + threads - 1) / threads;
  ordered_sum_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(gathered, world, count, out);
  return cudaGetLastError();
}

}  // namespace dsv4::fabric
