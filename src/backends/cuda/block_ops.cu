// Embedding into the C streams, DSpark taps, SwiGLU and row gathers (block_ops.cuh; RMSNorm and mHC
// in hc_norm_ops.cu, Engram and MoE in engram_moe_ops.cu).
#include "backends/cuda/block_ops.cuh"
#include "backends/cuda/fwd_reduce.cuh"
#include "core/bf16.h"

namespace dsv4::cuda {

namespace {

constexpr int kThreads = 256;

__device__ inline float rbf16(float x) { return dsv4::round_bf16(x); }

// Block (column block, row): one column of every stream per thread.
__global__ void embed_kernel(const uint16_t* embed, const int32_t* ids, int C, int64_t D, float* h, float* pi) {
  const int64_t r = blockIdx.y;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (blockIdx.x == 0 && threadIdx.x < C) pi[r * C + threadIdx.x] = threadIdx.x == 0 ? 1.0f : 0.0f;
  if (i >= D) return;
  const float v = dsv4::bf16_to_f32(embed[static_cast<int64_t>(ids[r]) * D + i]);
  for (int c = 0; c < C; ++c) h[(r * C + c) * D + i] = v;
}

__global__ void tap_kernel(const float* h, int C, int64_t D, int n_taps, int t, float* taps) {
  const int64_t r = blockIdx.y;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= D) return;
  float s = 0.0f;
  for (int c = 0; c < C; ++c) s += h[(r * C + c) * D + i];
  taps[(r * n_taps + t) * D + i] = rbf16(s / static_cast<float>(C));
}

__global__ void swiglu_kernel(const float* a, const float* u, int64_t n, float limit, float* v) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float g = a[i], up = u[i];
  if (limit > 0.0f) { up = fminf(fmaxf(up, -limit), limit); g = fminf(g, limit); }
  const float sg = g / (1.0f + expf(-g));
  v[i] = rbf16(sg * up);
}

__global__ void gather_kernel(const float* in, const int64_t* index, int64_t width, float* out) {
  const int64_t r = blockIdx.y;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < width) out[r * width + i] = in[index[r] * width + i];
}

inline dim3 row_grid(int64_t width, int64_t rows) {
  return dim3(static_cast<unsigned>((width + kThreads - 1) / kThreads), static_cast<unsigned>(rows));
}

}  // namespace

cudaError_t embed_streams(const uint16_t* embed, const int32_t* ids, int64_t rows, int C, int64_t D, float* h,
                          float* pi, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (C > kThreads) return cudaErrorInvalidValue;
  embed_kernel<<<row_grid(D, rows), kThreads, 0, s>>>(embed, ids, C, D, h, pi);
  return cudaGetLastError();
}

cudaError_t dspark_tap(const float* h, int64_t rows, int C, int64_t D, int n_taps, int t, float* taps,
                       cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  tap_kernel<<<row_grid(D, rows), kThreads, 0, s>>>(h, C, D, n_taps, t, taps);
  return cudaGetLastError();
}

cudaError_t swiglu_rows(const float* a, const float* u, int64_t rows, int64_t I, float limit, float* v,
                        cudaStream_t s) {
  const int64_t n = rows * I;
  if (n == 0) return cudaSuccess;
  swiglu_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, s>>>(a, u, n, limit, v);
  return cudaGetLastError();
}

cudaError_t gather_rows(const float* in, const int64_t* index, int64_t n, int64_t width, float* out,
                        cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  gather_kernel<<<row_grid(width, n), kThreads, 0, s>>>(in, index, width, out);
  return cudaGetLastError();
}

}  // namespace dsv4::cuda
