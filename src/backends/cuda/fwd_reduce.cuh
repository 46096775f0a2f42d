// Deterministic block reductions for the forward's row kernels: a fixed shuffle tree per warp,
// then warp 0 over the warp partials — the order depends only on the block size.
#pragma once

#include <cuda_runtime.h>

namespace dsv4::cuda {

// Sum of v over the block (every thread gets the result); red: shared float [Threads / 32].
template <int Threads>
__device__ inline float fwd_block_sum(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float t = lane < Threads / 32 ? red[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
  return t;
}

}  // namespace dsv4::cuda
