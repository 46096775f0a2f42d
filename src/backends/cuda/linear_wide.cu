// bf16 and fp32 linears: one warp per output column, lanes over 8-element K chunks in a fixed order.
#include "backends/cuda/linear.cuh"
#include <algorithm>

#include "core/bf16.h"

namespace dsv4::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kUnroll = 4;  // chunks in flight per lane

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off; off >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

__device__ __forceinline__ void load_chunk(const uint16_t* w, float (&v)[8]) {
  const uint4 q = __ldg(reinterpret_cast<const uint4*>(w));
  const uint32_t u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    v[2 * j] = __uint_as_float(u[j] << 16);
    v[2 * j + 1] = __uint_as_float(u[j] & 0xFFFF0000u);
  }
}

__device__ __forceinline__ void load_chunk(const float* w, float (&v)[8]) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(w)), b = __ldg(reinterpret_cast<const float4*>(w) + 1);
  v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}

// y[m, n] = sum_k x[m, k] w[n, k]: lane l takes chunks l, l + 32, ... (8 elements each) into 8
// partial sums; fp32 rows with in % 8 == 4 give their last 4 elements to lane (in/8) % 32. The
// partials combine pairwise, then the lane tree. Row m's arithmetic never depends on `rows`.
template <typename WT, bool kRound>
__global__ void __launch_bounds__(kWarps * 32) wide_linear_kernel(const float* __restrict__ x, int64_t rows,
                                                                  const WT* __restrict__ w, int64_t out, int64_t in,
                                                                  float* __restrict__ y) {
  const int lane = threadIdx.x & 31;
  const int64_t chunks = in / 8;
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); n < out;
       n += static_cast<int64_t>(gridDim.x) * kWarps) {
    const WT* wr = w + n * in;
    for (int64_t m = 0; m < rows; ++m) {
      const float* xr = x + m * in;
      float p[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      for (int64_t c0 = lane; c0 < chunks; c0 += 32 * kUnroll) {
        float wv[kUnroll][8];
#pragma unroll
        for (int t = 0; t < kUnroll; ++t)
          if (c0 + 32 * t < chunks) load_chunk(wr + (c0 + 32 * t) * 8, wv[t]);
#pragma unroll
        for (int t = 0; t < kUnroll; ++t) {
          const int64_t c = c0 + 32 * t;
          if (c < chunks) {
            const float4 xa = *reinterpret_cast<const float4*>(xr + c * 8);
            const float4 xb = *reinterpret_cast<const float4*>(xr + c * 8 + 4);
            const float xv[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
            for (int j = 0; j < 8; ++j) p[j] = __fmaf_rn(xv[j], wv[t][j], p[j]);
          }
        }
      }
      if ((in & 7) && lane == (chunks & 31)) {
        const WT* wt = wr + chunks * 8;
        float wv[8];
        for (int j = 0; j < 4; ++j) {
          if constexpr (sizeof(WT) == 2) wv[j] = __uint_as_float(static_cast<uint32_t>(wt[j]) << 16);
          else wv[j] = wt[j];
          p[j] = __fmaf_rn(xr[chunks * 8 + j], wv[j], p[j]);
        }
      }
      float acc = __fadd_rn(__fadd_rn(__fadd_rn(p[0], p[1]), __fadd_rn(p[2], p[3])),
                            __fadd_rn(__fadd_rn(p[4], p[5]), __fadd_rn(p[6], p[7])));
      acc = warp_sum(acc);
      if (lane == 0) y[m * out + n] = kRound ? round_bf16(acc) : acc;
    }
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

int sm_count() {
  static const int n = [] {
    int dev = 0, c = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&c, cudaDevAttrMultiProcessorCount, dev);
    return c > 0 ? c : 1;
  }();
  return n;
}

template <typename WT, bool kRound>
cudaError_t launch(const float* x, int64_t rows, const WT* w, int64_t out, int64_t in, float* y, cudaStream_t s) {
  if (rows < 0 || in % (sizeof(WT) == 2 ? 8 : 4) || !aligned16(x) || !aligned16(w)) return cudaErrorInvalidValue;
  if (rows == 0 || out == 0) return cudaSuccess;
  const int64_t ctas = std::min<int64_t>((out + kWarps - 1) / kWarps, int64_t(sm_count()) * 8);
  wide_linear_kernel<WT, kRound><<<static_cast<unsigned>(ctas), kWarps * 32, 0, s>>>(x, rows, w, out, in, y);
  return cudaGetLastError();
}

}  // namespace

cudaError_t bf16_linear(const float* x, int64_t rows, const Bf16View& W, float* y, cudaStream_t s) {
  return launch<uint16_t, true>(x, rows, W.w, W.out, W.in, y, s);
}

cudaError_t f32_linear(const float* x, int64_t rows, const F32View& W, float* y, cudaStream_t s) {
  return launch<float, false>(x, rows, W.w, W.out, W.in, y, s);
}

cudaError_t f32_linear(const float* x, int64_t rows, const Bf16View& W, float* y, cudaStream_t s) {
  return launch<uint16_t, false>(x, rows, W.w, W.out, W.in, y, s);
}

}  // namespace dsv4::cuda
