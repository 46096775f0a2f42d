// Device building blocks of the FP8 / FP4 linears: act_quant of a row tile into shared memory, and
// one output column's dot over 16-byte weight units in a fixed K order (shared with moe_experts.cu).
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "core/bf16.h"
#include "core/fp8.h"
#include "core/quant.h"
#include "core/ue8m0.h"

namespace dsv4::cuda::lowp {

constexpr int kThreads = 256;  // 8 warps per CTA, each warp owns whole output columns
constexpr int kWarps = kThreads / 32;
constexpr int kMaxTileRows = 4;  // rows staged in shared memory at once
constexpr int kUnroll = 8;       // 16-byte weight units in flight per lane

enum class Fmt { fp8, fp4 };

// A quantized weight as the kernels see it: unit u (16 bytes) of column n at w + n*row_bytes + 16u;
// its ue8m0 scale byte at scale + (n / scale_rows) * scale_stride + (u * elems) / scale_cols.
struct LowpWeight {
  const uint8_t* w;
  const uint8_t* scale;
  int64_t out, in, row_bytes, scale_stride;
  int32_t scale_rows, scale_cols;
};

template <Fmt F> struct Traits;
template <> struct Traits<Fmt::fp8> {
  static constexpr int kElems = 16;    // e4m3 per 16-byte unit
  static constexpr float kFactor = 1.0f;
};
template <> struct Traits<Fmt::fp4> {
  static constexpr int kElems = 32;    // e2m1 per 16-byte unit
  static constexpr float kFactor = 16384.0f;  // decode yields w * 2^-14 (see decode below)
};

// Shared-memory slot of quad q (4 floats) of unit u: quads xor-swizzled so that the 8 lanes of a
// quarter warp reading the same q of units 8i..8i+7 hit 8 different 16-byte bank groups.
template <int QU>
__device__ __forceinline__ int quad_slot(int u, int q) {
  return u * QU + (q ^ (QU == 8 ? (u & 7) : ((u >> 1) & 3)));
}

// act_quant (cpu::act_quant_row) of R rows into shared memory: xq float [R][in] swizzled by unit,
// xs float [R][in / act_block]. Row r is x + row_of(r) * in. One thread per 4 elements; the
// act_block / 4 consecutive lanes of a block (8 or 32) take its amax with xor shuffles (max is exact
// in any order). e4m3 codes by the hardware's cvt.rn.satfinite (= core's f32_to_e4m3). act_block is
// 32, 64 or 128 and divides in. Ends with __syncthreads().
template <Fmt F, typename RowOf>
__device__ void stage_rows(const float* __restrict__ x, int64_t in, int R, int act_block, RowOf row_of, float* sx,
                           float* sxs) {
  constexpr int QU = Traits<F>::kElems / 4;
  const int group = act_block / 4;  // lanes per act block
  const int quads = static_cast<int>(in / 4), nb = static_cast<int>(in / act_block);
  const int total = R * quads;
  for (int base = 0; base < total; base += blockDim.x) {  // warp-uniform trip count (shuffles below)
    const int item = base + static_cast<int>(threadIdx.x);
    const bool live = item < total;
    const int r = live ? item / quads : 0, quad = live ? item % quads : 0;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (live) v = *reinterpret_cast<const float4*>(x + row_of(r) * in + 4 * static_cast<int64_t>(quad));
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
    for (int off = group / 2; off; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    if (!live) continue;
    const float s = ue8m0_to_f32(fp8_ue8m0_scale(amax));
    const float inv_s = __fdiv_rn(1.0f, s);
    if (quad % group == 0) sxs[r * nb + quad / group] = s;
    const __nv_fp8x2_storage_t c01 =
        __nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(v.x, inv_s), __fmul_rn(v.y, inv_s)), __NV_SATFINITE, __NV_E4M3);
    const __nv_fp8x2_storage_t c23 =
        __nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(v.z, inv_s), __fmul_rn(v.w, inv_s)), __NV_SATFINITE, __NV_E4M3);
    const __half2_raw h01 = __nv_cvt_fp8x2_to_halfraw2(c01, __NV_E4M3), h23 = __nv_cvt_fp8x2_to_halfraw2(c23, __NV_E4M3);
    const float2 f01 = __half22float2(*reinterpret_cast<const __half2*>(&h01));
    const float2 f23 = __half22float2(*reinterpret_cast<const __half2*>(&h23));
    *reinterpret_cast<float4*>(sx + static_cast<int64_t>(r) * in + 4 * quad_slot<QU>(quad / QU, quad % QU)) =
        make_float4(f01.x, f01.y, f23.x, f23.y);
  }
  __syncthreads();
}

// 16 e4m3 -> 16 floats (exact: e4m3 -> f16 -> f32).
__device__ __forceinline__ void decode(uint4 v, float (&w)[16]) {
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(u[j] >> (16 * h)), __NV_E4M3);
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&r));
      w[4 * j + 2 * h] = f.x;
      w[4 * j + 2 * h + 1] = f.y;
    }
}

// 32 e2m1 -> 32 floats holding value * 2^-14 (exact). A nibble s e1 e0 m placed as f16 bits
// s<<15 | (e1 e0 m)<<9 is that value times 2^-14 (e = 0 lands on the f16 subnormal 0.5m * 2^-14).
// Nibbles j and j+4 of a word are 16 bits apart, so one shift places both halves of an f16x2.
__device__ __forceinline__ void decode(uint4 v, float (&w)[32]) {
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t a = j == 3 ? (u[i] >> 3) : (u[i] << (9 - 4 * j));
      const uint32_t b = u[i] << (12 - 4 * j);
      const uint32_t h2 = (a & 0x0E000E00u) | (b & 0x80008000u);
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h2));
      w[8 * i + j] = f.x;
      w[8 * i + j + 4] = f.y;
    }
}

// Fixed xor tree over the 32 lanes; every lane ends with the same value (a + b == b + a).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off; off >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// acc[r] (this lane's part of output column n for staged rows r < R) over the lane's units
// u = lane, lane + 32, ... in increasing order: per unit, the exact products summed as 4 interleaved
// partials combined pairwise, times xs * ws (exact powers of two), added to acc. Nothing here
// depends on R beyond which rows exist: row r's operations are the same for every R.
template <Fmt F, int R>
__device__ __forceinline__ void column_dot(const LowpWeight& W, int64_t n, int act_block, const float* sx,
                                           const float* sxs, float (&acc)[R]) {
  constexpr int E = Traits<F>::kElems, QU = E / 4;
  const int lane = threadIdx.x & 31;
  const int U = static_cast<int>(W.in / E), nb = static_cast<int>(W.in / act_block);
  const uint8_t* wrow = W.w + n * W.row_bytes;
  const uint8_t* srow = W.scale + (n / W.scale_rows) * W.scale_stride;
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.f;
  for (int j0 = 0; j0 * 32 < U; j0 += kUnroll) {
    uint4 wv[kUnroll];
    float ws[kUnroll];
#pragma unroll
    for (int t = 0; t < kUnroll; ++t) {
      const int u = lane + 32 * (j0 + t);
      if (u < U) {
        wv[t] = __ldg(reinterpret_cast<const uint4*>(wrow) + u);
        ws[t] = ue8m0_to_f32(__ldg(srow + u * E / W.scale_cols));
      }
    }
#pragma unroll
    for (int t = 0; t < kUnroll; ++t) {
      const int u = lane + 32 * (j0 + t);
      if (u < U) {
        float w[E];
        decode(wv[t], w);
        const float wsf = __fmul_rn(ws[t], Traits<F>::kFactor);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const float* xr = sx + static_cast<int64_t>(r) * W.in;
          float p[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
          for (int q = 0; q < QU; ++q) {
            const float4 xv = *reinterpret_cast<const float4*>(xr + 4 * quad_slot<QU>(u, q));
            p[0] = __fmaf_rn(xv.x, w[4 * q + 0], p[0]);
            p[1] = __fmaf_rn(xv.y, w[4 * q + 1], p[1]);
            p[2] = __fmaf_rn(xv.z, w[4 * q + 2], p[2]);
            p[3] = __fmaf_rn(xv.w, w[4 * q + 3], p[3]);
          }
          const float h = __fadd_rn(__fadd_rn(p[0], p[1]), __fadd_rn(p[2], p[3]));
          const float sc = __fmul_rn(sxs[r * nb + u * E / act_block], wsf);
          acc[r] = __fmaf_rn(h, sc, acc[r]);  // h * sc is exact (power-of-two scale): fma == mul + add
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = warp_sum(acc[r]);
}

// Asks L2 for the first `max_units` weight units of this lane in column n, so the weight stream is
// already in flight while the CTA stages its rows.
template <Fmt F>
__device__ __forceinline__ void prefetch_column(const LowpWeight& W, int64_t n, int max_units) {
  constexpr int E = Traits<F>::kElems;
  if (n >= W.out) return;
  const int U = static_cast<int>(W.in / E);
  const uint8_t* wrow = W.w + n * W.row_bytes;
  for (int u = threadIdx.x & 31, j = 0; u < U && j < max_units; u += 32, ++j)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(wrow + 16 * static_cast<int64_t>(u)));
}

// Shared-memory bytes for `rt` staged rows of width `in`.
inline size_t stage_bytes(int rt, int64_t in, int act_block) {
  return sizeof(float) * static_cast<size_t>(rt) * static_cast<size_t>(in + in / act_block);
}

}  // namespace dsv4::cuda::lowp
