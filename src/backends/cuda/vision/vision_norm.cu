// The vision tower's RMSNorm (vision_kernels.cuh rms_norm): one warp per row. Lane l sums the squares of
// elements l, l + 32, ... in order, the lanes' sums meet in an xor tree; the statistic's order is fixed by V
// alone, never by the row count or the other rows.
#include "backends/cuda/vision/vision_kernels.cuh"

#include "core/bf16.h"

namespace dsv4::cuda::vision {
namespace {

constexpr int kWarps = 8;

__global__ void __launch_bounds__(kWarps * 32) rms_norm_kernel(const float* x, int64_t rows, int64_t V,
                                                                const uint16_t* w, float eps, float* y) {
  const int lane = threadIdx.x & 31;
  const int64_t row = blockIdx.x * int64_t{kWarps} + (threadIdx.x >> 5);
  if (row >= rows) return;
  const float* xr = x + row * V;
  float ss = 0.f;
  for (int64_t i = lane; i < V; i += 32) ss = __fadd_rn(ss, __fmul_rn(xr[i], xr[i]));
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) ss = __fadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, d));
  const float mean = __fdiv_rn(ss, static_cast<float>(V));
  const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
  float* yr = y + row * V;
  for (int64_t i = lane; i < V; i += 32) yr[i] = round_bf16(__fmul_rn(bf16_to_f32(w[i]), __fmul_rn(xr[i], r)));
}

}  // namespace

cudaError_t rms_norm(const float* x, int64_t rows, int64_t V, const uint16_t* w, float eps, float* y,
                     cudaStream_t s) {
  if (V % 32) return cudaErrorInvalidValue;
  if (rows > 0)
    rms_norm_kernel<<<static_cast<unsigned>((rows + kWarps - 1) / kWarps), kWarps * 32, 0, s>>>(x, rows, V, w, eps,
                                                                                                y);
  return cudaGetLastError();
}

}  // namespace dsv4::cuda::vision
