// FP8 / FP4 / bf16 / fp32 linears: one warp per output column, lanes over fixed 32-element K chunks.
#include <cuda_fp8.h>

#include "backends/cuda/linear.cuh"
#include "core/bf16.h"
#include "core/fp4.h"
#include "core/fp8.h"
#include "core/quant.h"
#include "core/ue8m0.h"

namespace dsv4::cuda {
namespace {

constexpr int kWarps = 8;  // warps per CTA; each warp owns whole output columns

// Fixed xor tree over the 32 lanes; every lane ends with the same value (a+b == b+a).
__device__ inline float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off; off >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Sum of 32 exact products in a fixed order: 4 interleaved partials, combined pairwise.
__device__ inline float chunk_dot(const float* a, const float* b) {
  float p[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int i = 0; i < 32; ++i) p[i & 3] = __fmaf_rn(a[i], b[i], p[i & 3]);
  return __fadd_rn(__fadd_rn(p[0], p[1]), __fadd_rn(p[2], p[3]));
}

// act_quant (cpu::act_quant_row) of the 32 elements x[k0, k0+32) of one row: e4m3 values in q,
// returns the ue8m0 scale of the act_block holding them.
__device__ inline float act_quant_chunk(const float* row, int64_t in, int64_t k0, int act_block, float* q) {
  const int64_t a0 = k0 / act_block * act_block;
  const int64_t a1 = min(a0 + act_block, in);
  float amax = 0.f;
  for (int64_t k = a0; k < a1; ++k) amax = fmaxf(amax, fabsf(row[k]));
  const float s = ue8m0_to_f32(fp8_ue8m0_scale(amax));
  const float inv_s = __fdiv_rn(1.0f, s);
#pragma unroll
  for (int i = 0; i < 32; ++i) q[i] = e4m3_to_f32(fp8_ue8m0_code(row[k0 + i], inv_s));
  return s;
}

__device__ inline void decode_e4m3x16(uint4 v, float* w) {
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(u[j] >> (16 * h)), __NV_E4M3);
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&r));
      w[4 * j + 2 * h] = f.x;
      w[4 * j + 2 * h + 1] = f.y;
    }
  }
}

__device__ inline void decode_e2m1x32(uint4 v, float* w) {
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int i = 0; i < 8; ++i) w[8 * j + i] = e2m1_to_f32(static_cast<uint8_t>((u[j] >> (4 * i)) & 0xFu));
}

__global__ void fp8_linear_kernel(const float* __restrict__ x, int64_t rows, Fp8View W, int act_block,
                                  float* __restrict__ y) {
  const int lane = threadIdx.x & 31;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (n >= W.out) return;
  const int64_t in = W.in, chunks = in / 32, sb_in = (in + W.block - 1) / W.block;
  const uint8_t* wr = W.w + n * in;
  const uint8_t* ws = W.scale + (n / W.block) * sb_in;
  for (int64_t m = 0; m < rows; ++m) {
    const float* xr = x + m * in;
    float acc = 0.f;
    for (int64_t c = lane; c < chunks; c += 32) {
      float w[32], q[32];
      decode_e4m3x16(*reinterpret_cast<const uint4*>(wr + c * 32), w);
      decode_e4m3x16(*reinterpret_cast<const uint4*>(wr + c * 32 + 16), w + 16);
      const float xs = act_quant_chunk(xr, in, c * 32, act_block, q);
      const float s = chunk_dot(q, w);
      acc = __fadd_rn(acc, __fmul_rn(__fmul_rn(s, xs), ue8m0_to_f32(ws[c * 32 / W.block])));
    }
    acc = warp_sum(acc);
    if (lane == 0) y[m * W.out + n] = round_bf16(acc);
  }
}

__global__ void fp4_linear_kernel(const float* __restrict__ x, int64_t rows, Fp4View W, int act_block,
                                  float* __restrict__ y) {
  const int lane = threadIdx.x & 31;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (n >= W.out) return;
  const int64_t in = W.in, chunks = in / 32;
  const uint8_t* wr = W.w + n * (in / 2);
  const uint8_t* ws = W.scale + n * chunks;
  for (int64_t m = 0; m < rows; ++m) {
    const float* xr = x + m * in;
    float acc = 0.f;
    for (int64_t c = lane; c < chunks; c += 32) {
      float w[32], q[32];
      decode_e2m1x32(*reinterpret_cast<const uint4*>(wr + c * 16), w);
      const float xs = act_quant_chunk(xr, in, c * 32, act_block, q);
      const float s = chunk_dot(q, w);
      acc = __fadd_rn(acc, __fmul_rn(__fmul_rn(s, xs), ue8m0_to_f32(ws[c])));
    }
    acc = warp_sum(acc);
    if (lane == 0) y[m * W.out + n] = round_bf16(acc);
  }
}

// bf16 / fp32: lanes over 8-element chunks, 8 partial sums per lane, then the lane tree.
template <bool kF32>
__global__ void wide_linear_kernel(const float* __restrict__ x, int64_t rows, const void* __restrict__ wv,
                                   int64_t out, int64_t in, float* __restrict__ y) {
  const int lane = threadIdx.x & 31;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (n >= out) return;
  const int64_t chunks = in / 8;
  for (int64_t m = 0; m < rows; ++m) {
    const float* xr = x + m * in;
    float p[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int64_t c = lane; c < chunks; c += 32) {
      float w[8];
      if constexpr (kF32) {
        const float4* wr = reinterpret_cast<const float4*>(static_cast<const float*>(wv) + n * in + c * 8);
        const float4 a = wr[0], b = wr[1];
        w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w; w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
      } else {
        const uint4 v = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(wv) + n * in + c * 8);
        const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          w[2 * j] = __uint_as_float(u[j] << 16);
          w[2 * j + 1] = __uint_as_float(u[j] & 0xFFFF0000u);
        }
      }
      const float4 xa = *reinterpret_cast<const float4*>(xr + c * 8);
      const float4 xb = *reinterpret_cast<const float4*>(xr + c * 8 + 4);
      const float xv[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
      for (int j = 0; j < 8; ++j) p[j] = __fmaf_rn(xv[j], w[j], p[j]);
    }
    // in % 8 == 4 (fp32 only): the last 4 elements go to lane (chunks % 32), partials 0..3.
    if (kF32 && (in & 7) && lane == (chunks & 31)) {
      const float* wr = static_cast<const float*>(wv) + n * in + chunks * 8;
      for (int j = 0; j < 4; ++j) p[j] = __fmaf_rn(xr[chunks * 8 + j], wr[j], p[j]);
    }
    float acc = __fadd_rn(__fadd_rn(__fadd_rn(p[0], p[1]), __fadd_rn(p[2], p[3])),
                          __fadd_rn(__fadd_rn(p[4], p[5]), __fadd_rn(p[6], p[7])));
    acc = warp_sum(acc);
    if (lane == 0) y[m * out + n] = kF32 ? acc : round_bf16(acc);
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

dim3 grid_for(int64_t out) { return dim3(static_cast<unsigned>((out + kWarps - 1) / kWarps)); }

}  // namespace

cudaError_t fp8_linear(const float* x, int64_t rows, const Fp8View& W, int act_block, float* y, cudaStream_t s) {
  if (rows < 0 || W.in % 32 || W.block <= 0 || W.block % 32 || act_block <= 0 || act_block % 32 || !aligned16(x) ||
      !aligned16(W.w))
    return cudaErrorInvalidValue;
  if (rows == 0 || W.out == 0) return cudaSuccess;
  fp8_linear_kernel<<<grid_for(W.out), kWarps * 32, 0, s>>>(x, rows, W, act_block, y);
  return cudaGetLastError();
}

cudaError_t fp4_linear(const float* x, int64_t rows, const Fp4View& W, int act_block, float* y, cudaStream_t s) {
  if (rows < 0 || W.in % 32 || act_block <= 0 || act_block % 32 || !aligned16(x) || !aligned16(W.w))
    return cudaErrorInvalidValue;
  if (rows == 0 || W.out == 0) return cudaSuccess;
  fp4_linear_kernel<<<grid_for(W.out), kWarps * 32, 0, s>>>(x, rows, W, act_block, y);
  return cudaGetLastError();
}

cudaError_t bf16_linear(const float* x, int64_t rows, const Bf16View& W, float* y, cudaStream_t s) {
  if (rows < 0 || W.in % 8 || !aligned16(x) || !aligned16(W.w)) return cudaErrorInvalidValue;
  if (rows == 0 || W.out == 0) return cudaSuccess;
  wide_linear_kernel<false><<<grid_for(W.out), kWarps * 32, 0, s>>>(x, rows, W.w, W.out, W.in, y);
  return cudaGetLastError();
}

cudaError_t f32_linear(const float* x, int64_t rows, const F32View& W, float* y, cudaStream_t s) {
  if (rows < 0 || W.in % 4 || !aligned16(x) || !aligned16(W.w)) return cudaErrorInvalidValue;
  if (rows == 0 || W.out == 0) return cudaSuccess;
  wide_linear_kernel<true><<<grid_for(W.out), kWarps * 32, 0, s>>>(x, rows, W.w, W.out, W.in, y);
  return cudaGetLastError();
}

}  // namespace dsv4::cuda
