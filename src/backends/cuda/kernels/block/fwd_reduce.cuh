// Deterministic block reductions for the forward's row kernels: a fixed shuffle tree per warp,
// then warp 0 over the warp partials — the order depends only on the block size.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

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

// Block argmax of the threads' candidates (v, i): the largest value, the lowest index among equal
// values; a selection, no arithmetic, so the pick is the same whatever the tree's order. sv, si:
// shared [blockDim.x], blockDim.x a power of two; every thread must call it, and every thread may
// read the pick from sv[0], si[0] after it returns (until they are rewritten).
template <typename Index>
__device__ inline void block_argmax(float v, Index i, float* sv, Index* si) {
  sv[threadIdx.x] = v;
  si[threadIdx.x] = i;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) {
      const float v2 = sv[threadIdx.x + o];
      const Index i2 = si[threadIdx.x + o];
      if (v2 > sv[threadIdx.x] || (v2 == sv[threadIdx.x] && i2 < si[threadIdx.x])) {
        sv[threadIdx.x] = v2;
        si[threadIdx.x] = i2;
      }
    }
    __syncthreads();
  }
}

// Exclusive prefix sum of c over the threads of the block (shuffles within warps, then over the warp
// totals; integers, so exact); total gets the sum of all. warp_total: shared int32 [32]. Every thread
// must call it; blockDim.x a multiple of 32.
__device__ inline int32_t block_exclusive_scan(int32_t c, int32_t* warp_total, int32_t& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  int32_t incl = c;
  for (int o = 1; o < 32; o <<= 1) {
    const int32_t t = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += t;
  }
  if (lane == 31) warp_total[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    int32_t w = lane < nw ? warp_total[lane] : 0;
    for (int o = 1; o < 32; o <<= 1) {
      const int32_t t = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += t;
    }
    if (lane < nw) warp_total[lane] = w;  // inclusive over warps 0 .. lane
  }
  __syncthreads();
  total = warp_total[nw - 1];
  const int32_t before = warp ? warp_total[warp - 1] : 0;
  __syncthreads();  // warp_total may be reused by the caller
  return incl - c + before;
}

}  // namespace dsv4::cuda
