// Deterministic reductions and shared element formulas of the forward's row kernels: fixed trees
// whose order depends only on the block size or the row's shape, never on the row count.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/bf16.h"

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

// Sum over the 32 lanes of a warp by an xor tree; every lane gets the same bits (a + b == b + a).
__device__ __forceinline__ float fwd_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Row statistics in slices: a row of n values is cut into 32-value slices; slice s's partial is
// fwd_warp_sum of x[32 s + lane]^2 (0 past n), and the row's sum of the S partials p[s * stride]
// is fwd_slices_sum (lane l adds s = l, l + 32, ... in turn, then the lanes by fwd_warp_sum). Any
// kernel that follows these two steps gets the same bits, however its blocks split the row.
constexpr int kFwdSlice = 32;

__device__ __forceinline__ float fwd_slice_sumsq(float v) { return fwd_warp_sum(__fmul_rn(v, v)); }

__device__ __forceinline__ float fwd_slices_sum(const float* p, int64_t stride, int S) {
  float t = 0.0f;
#pragma unroll 4
  for (int s = threadIdx.x & 31; s < S; s += 32) t = __fadd_rn(t, p[s * stride]);
  return fwd_warp_sum(t);
}

// rsqrt(sumsq / n + eps) as the oracle's rmsnorm_row forms it (IEEE division and square root).
__device__ __forceinline__ float fwd_rms_scale(float sumsq, int64_t n, float eps) {
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(sumsq, static_cast<float>(n)), eps)));
}

// One normalised element: bf16(w * (x * r)), or bf16(x * r) without a weight.
__device__ __forceinline__ float fwd_norm_elem(float x, const float* w, int64_t i, float r) {
  const float v = __fmul_rn(x, r);
  return ::dsv4::round_bf16(w ? __fmul_rn(w[i], v) : v);
}

// mHC expand of one element (cpu::hc_expand's order): h'_k = bf16(post_k * y + sum_j A[j][k] h_j),
// h [C] in registers (C <= 8), mix = pre [C], post [C], A [C][C].
__device__ __forceinline__ void fwd_expand_elem(const float* mix, int C, float y, const float* hv, float* out) {
  const float* post = mix + C;
  const float* A = mix + 2 * C;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    if (k >= C) break;
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (j >= C) break;
      s = __fadd_rn(s, __fmul_rn(A[j * C + k], hv[j]));
    }
    out[k] = ::dsv4::round_bf16(__fadd_rn(__fmul_rn(post[k], y), s));
  }
}

}  // namespace dsv4::cuda
