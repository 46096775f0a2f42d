// Device helpers of the attention kernels: bf16 rounding, fixed-order block reductions, RoPE
// rotation and the packed row codecs (model-spec.md §3.2, §4.2, §4.3) as the oracle evaluates them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "core/bf16.h"
#include "core/fp4.h"
#include "core/fp8.h"
#include "core/quant.h"
#include "core/ue8m0.h"

namespace dsv4::cuda::attn {

__device__ __forceinline__ float rb(float x) { return ::dsv4::round_bf16(x); }

// Sum over the block in a fixed order (warp butterflies, then warp partials in warp order); every
// thread gets the result. sh: >= 33 floats of shared memory. blockDim.x a multiple of 32.
__device__ __forceinline__ float block_sum(float v, float* sh) {
  for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads();
  if ((threadIdx.x & 31) == 0) sh[w] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.0f;
    for (int i = 0; i < nw; ++i) t = __fadd_rn(t, sh[i]);
    sh[32] = t;
  }
  __syncthreads();
  return sh[32];
}

// exp of a float as the C library's expf rounds it (evaluated in double, rounded once).
__device__ __forceinline__ float exp_f(float x) { return static_cast<float>(exp(static_cast<double>(x))); }

// The oracle's dot order (cpu::dot): 8 interleaved partial sums, lane j of an aligned group of 8
// lanes holding partial j; combined ((0+1)+(2+3))+((4+5)+(6+7)). The result is valid in lane j == 0.
__device__ __forceinline__ float combine8(float l) {
  l = __fadd_rn(l, __shfl_down_sync(0xffffffffu, l, 1));
  l = __fadd_rn(l, __shfl_down_sync(0xffffffffu, l, 2));
  return __fadd_rn(l, __shfl_down_sync(0xffffffffu, l, 4));
}

// Sum of squares of x [n] in the oracle's order by the first 8 lanes of warp 0; broadcast through
// sh[32] to every thread of the block.
__device__ __forceinline__ float sum_squares8(const float* x, int64_t n, float* sh) {
  if (threadIdx.x < 32) {
    const int j = threadIdx.x & 7;
    float l = 0.0f;
    const int64_t n8 = n & ~int64_t{7};
    if (threadIdx.x < 8) {
      for (int64_t k = j; k < n8; k += 8) l = __fadd_rn(l, __fmul_rn(x[k], x[k]));
      if (n8 + j < n) l = __fadd_rn(l, __fmul_rn(x[n8 + j], x[n8 + j]));
    }
    l = combine8(l);
    if (threadIdx.x == 0) sh[32] = l;
  }
  __syncthreads();
  const float r = sh[32];
  __syncthreads();
  return r;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// cos / sin of fp32(pos) * f, the angle in fp32 as the reference's torch.outer, the functions
// evaluated in double and rounded once (the oracle calls the C library's float cos / sin).
__device__ __forceinline__ void rope_cs(int64_t pos, float f, float& c, float& s) {
  const float ang = __fmul_rn(static_cast<float>(pos), f);
  double sd, cd;
  sincos(static_cast<double>(ang), &sd, &cd);
  c = static_cast<float>(cd);
  s = static_cast<float>(sd);
}

// (a + ib)(c + is), each product and sum rounded in fp32 (no contraction), -> bf16.
__device__ __forceinline__ void rope_pair(float& a, float& b, float c, float s) {
  const float x = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
  const float y = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
  a = rb(x);
  b = rb(y);
}

// Fast exact decoders (the same values as core's e4m3_to_f32 / e2m1_to_f32 / ue8m0_to_f32 for
// every non-NaN code): e4m3 through the hardware fp8 -> half conversion, e2m1 and ue8m0 by bits.
__device__ __forceinline__ float e4m3_f(uint32_t b) {
  const unsigned short h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), __NV_E4M3).x;
  return __half2float(__ushort_as_half(h));
}
__device__ __forceinline__ float e2m1_f(uint32_t c) {
  const uint32_t e = (c >> 1) & 3u, m = c & 1u;
  const uint32_t mag = e ? ((e + 126u) << 23) | (m << 22) : (m ? 0x3f000000u : 0u);
  return __uint_as_float(mag | ((c & 8u) << 28));
}
__device__ __forceinline__ float ue8m0_f(uint32_t b) { return b ? __uint_as_float(b << 23) : __uint_as_float(0x00400000u); }

// Row codecs: element i of a packed row.
__device__ __forceinline__ float fp8_row_at(const uint8_t* row, int64_t d, int64_t i) {
  return e4m3_f(row[i]) * ue8m0_f(row[d + (i >> 5)]);
}
__device__ __forceinline__ float fp4e4m3_row_at(const uint8_t* row, int64_t d, int64_t i) {
  return e2m1_f((row[i >> 1] >> (4 * (i & 1))) & 15) * e4m3_f(row[d / 2 + (i >> 4)]);
}
__device__ __forceinline__ float fp4ue8m0_row_at(const uint8_t* row, int64_t d, int64_t i) {
  return e2m1_f((row[i >> 1] >> (4 * (i & 1))) & 15) * ue8m0_f(row[d / 2 + (i >> 5)]);
}

// Warp-cooperative packing of one 32-element group held one element per lane (x = lane's value).
// Returns the dequantized value of the lane's element.
__device__ __forceinline__ float pack_fp8_group32(float x, int lane, uint8_t* codes, uint8_t* scale) {
  const float amax = warp_max(fabsf(x));
  const uint8_t sb = ::dsv4::fp8_ue8m0_scale(amax);
  const float sv = ::dsv4::ue8m0_to_f32(sb);
  const uint8_t c = ::dsv4::fp8_ue8m0_code(x, 1.0f / sv);
  codes[lane] = c;
  if (lane == 0) *scale = sb;
  return ::dsv4::e4m3_to_f32(c) * sv;
}
__device__ __forceinline__ float pack_fp4_ue8m0_group32(float x, int lane, uint8_t* codes, uint8_t* scale) {
  const float amax = warp_max(fabsf(x));
  const uint8_t sb = ::dsv4::fp4_ue8m0_scale(amax);
  const float sv = ::dsv4::ue8m0_to_f32(sb);
  const uint8_t c = ::dsv4::fp4_ue8m0_code(x, 1.0f / sv);
  const uint8_t hi = static_cast<uint8_t>(__shfl_down_sync(0xffffffffu, c, 1));
  if ((lane & 1) == 0) codes[lane >> 1] = static_cast<uint8_t>(c | (hi << 4));
  if (lane == 0) *scale = sb;
  return ::dsv4::e2m1_to_f32(c) * sv;
}
// Two 16-element groups per warp (lanes 0-15, 16-31): codes of group k at codes + 8k, scale at scale[k].
__device__ __forceinline__ float pack_fp4_e4m3_group16x2(float x, int lane, uint8_t* codes, uint8_t* scale) {
  float amax = fabsf(x);
  for (int o = 8; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const uint8_t sc = ::dsv4::fp4_e4m3_scale(amax);
  const float sv = ::dsv4::e4m3_to_f32(sc);
  const uint8_t c = ::dsv4::fp4_e4m3_code(x, sv);
  const uint8_t hi = static_cast<uint8_t>(__shfl_down_sync(0xffffffffu, c, 1));
  if ((lane & 1) == 0) codes[lane >> 1] = static_cast<uint8_t>(c | (hi << 4));
  if ((lane & 15) == 0) scale[lane >> 4] = sc;
  return ::dsv4::e2m1_to_f32(c) * sv;
}

}  // namespace dsv4::cuda::attn
