// FP8 / FP4 linears: rows act_quant'ed into shared memory per CTA, one warp per output column,
// lanes over 16-byte weight units in a fixed K order (lowp_tile.cuh); a persistent grid.
#include <algorithm>
#include <initializer_list>

#include "backends/cuda/exl3_view.h"
#include "backends/cuda/linear.cuh"
#include "backends/cuda/lowp_tile.cuh"

namespace dsv4::cuda {
namespace {

using lowp::Fmt;
using lowp::LowpWeight;

// Output column n of staged rows [r0, r0 + R): lane r writes row r.
template <Fmt F, int R>
__device__ __forceinline__ void emit_column(const LowpWeight& W, int64_t n, int act_block, const float* sx,
                                            const float* sxs, int64_t r0, float* __restrict__ y) {
  float acc[R];
  lowp::column_dot<F, R>(W, n, act_block, sx, sxs, acc);
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (lane == r) y[(r0 + r) * W.out + n] = round_bf16(acc[r]);
}

// kRowsMax 1 (a single row: fewer registers, more resident warps) or 4; row r's arithmetic is the
// same code either way.
template <Fmt F, int kRowsMax>
__global__ void __launch_bounds__(lowp::kThreads, kRowsMax == 1 ? 3 : 2) lowp_linear_kernel(const float* __restrict__ x, int64_t rows,
                                                                     LowpWeight W, int act_block, int rt,
                                                                     float* __restrict__ y) {
  extern __shared__ float4 smem4[];
  float* sx = reinterpret_cast<float*>(smem4);
  float* sxs = sx + static_cast<int64_t>(rt) * W.in;
  const int warp = threadIdx.x >> 5;
  const int64_t n_first = static_cast<int64_t>(blockIdx.x) * lowp::kWarps + warp;
  lowp::prefetch_column<F>(W, n_first, 16);
  lowp::prefetch_column<F>(W, n_first + static_cast<int64_t>(gridDim.x) * lowp::kWarps, 16);
  for (int64_t r0 = 0; r0 < rows; r0 += rt) {
    const int R = static_cast<int>(std::min<int64_t>(rt, rows - r0));
    if (r0) __syncthreads();  // every warp is done with the previous tile
    lowp::stage_rows<F>(x, W.in, R, act_block, [r0](int r) { return r0 + r; }, sx, sxs);
    for (int64_t n = static_cast<int64_t>(blockIdx.x) * lowp::kWarps + warp; n < W.out;
         n += static_cast<int64_t>(gridDim.x) * lowp::kWarps) {
      if constexpr (kRowsMax == 1) {
        emit_column<F, 1>(W, n, act_block, sx, sxs, r0, y);
      } else {
        switch (R) {
          case 1: emit_column<F, 1>(W, n, act_block, sx, sxs, r0, y); break;
          case 2: emit_column<F, 2>(W, n, act_block, sx, sxs, r0, y); break;
          case 3: emit_column<F, 3>(W, n, act_block, sx, sxs, r0, y); break;
          default: emit_column<F, 4>(W, n, act_block, sx, sxs, r0, y); break;
        }
      }
    }
  }
}

struct DeviceLimits {
  int sms = 0;
  int smem_optin = 0;
};

// Per-device limits, read once (the engine runs on one device per process).
const DeviceLimits& limits() {
  static const DeviceLimits l = [] {
    DeviceLimits d;
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev);
    cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (d.sms <= 0) d.sms = 1;
    if (d.smem_optin < 48 * 1024) d.smem_optin = 48 * 1024;
    for (const void* k : {reinterpret_cast<const void*>(lowp_linear_kernel<Fmt::fp8, 1>),
                          reinterpret_cast<const void*>(lowp_linear_kernel<Fmt::fp8, 4>),
                          reinterpret_cast<const void*>(lowp_linear_kernel<Fmt::fp4, 1>),
                          reinterpret_cast<const void*>(lowp_linear_kernel<Fmt::fp4, 4>)})
      cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, d.smem_optin);
    return d;
  }();
  return l;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <Fmt F>
cudaError_t launch(const float* x, int64_t rows, const LowpWeight& W, int act_block, float* y, cudaStream_t s) {
  if (rows < 0 || W.in % 32 || (act_block != 32 && act_block != 64 && act_block != 128) || W.in % act_block || !aligned16(x) ||
      !aligned16(W.w) || W.scale_cols <= 0 || W.scale_cols % 32)
    return cudaErrorInvalidValue;
  if (rows == 0 || W.out == 0) return cudaSuccess;
  const DeviceLimits& L = limits();
  // Rows staged per pass: a function of the shape only (and never of how rows are grouped).
  int rt = lowp::kMaxTileRows;
  while (rt > 1 && lowp::stage_bytes(rt, W.in, act_block) > static_cast<size_t>(L.smem_optin)) --rt;
  if (lowp::stage_bytes(rt, W.in, act_block) > static_cast<size_t>(L.smem_optin)) return cudaErrorInvalidValue;
  rt = static_cast<int>(std::min<int64_t>(rt, rows));
  const int64_t ctas = std::min<int64_t>((W.out + lowp::kWarps - 1) / lowp::kWarps, int64_t(L.sms) * 8);
  const size_t smem = lowp::stage_bytes(rt, W.in, act_block);
  if (rt == 1)
    lowp_linear_kernel<F, 1><<<static_cast<unsigned>(ctas), lowp::kThreads, smem, s>>>(x, rows, W, act_block, rt, y);
  else
    lowp_linear_kernel<F, 4><<<static_cast<unsigned>(ctas), lowp::kThreads, smem, s>>>(x, rows, W, act_block, rt, y);
  return cudaGetLastError();
}

}  // namespace

cudaError_t fp8_linear(const float* x, int64_t rows, const Fp8View& W, int act_block, float* y, cudaStream_t s) {
  if (W.exl3) return exl3_linear(x, rows, *W.exl3, y, Exl3Out::bf16, s);  // a pack's linear (no act_quant)
  if (W.block <= 0 || W.block % 32) return cudaErrorInvalidValue;
  const LowpWeight L{W.w, W.scale, W.out, W.in, W.in, (W.in + W.block - 1) / W.block, W.block, W.block};
  return launch<Fmt::fp8>(x, rows, L, act_block, y, s);
}

cudaError_t fp4_linear(const float* x, int64_t rows, const Fp4View& W, int act_block, float* y, cudaStream_t s) {
  if (W.exl3) return exl3_linear(x, rows, *W.exl3, y, Exl3Out::bf16, s);  // a pack's linear (no act_quant)
  const LowpWeight L{W.w, W.scale, W.out, W.in, W.in / 2, W.in / 32, 1, 32};
  return launch<Fmt::fp4>(x, rows, L, act_block, y, s);
}

}  // namespace dsv4::cuda
