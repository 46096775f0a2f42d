// The vision tower's elementwise kernels (vision_kernels.cuh): widening, bias adds with their one rounding,
// residual adds, SwiGLU and the aligner's GELU. Explicit _rn intrinsics keep every product and sum a
// separate f32 rounding, as in the oracle (no contraction into FMAs).
#include "backends/cuda/vision/vision_kernels.cuh"

#include "core/bf16.h"

namespace dsv4::cuda::vision {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 32 ? b : 65535 * 32);
}

#define DSV4_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); i += int64_t{gridDim.x} * blockDim.x)

__global__ void widen_kernel(const uint16_t* in, int64_t n, float* out) {
  DSV4_GRID_LOOP(i, n) out[i] = bf16_to_f32(in[i]);
}

__global__ void bias_residual_kernel(const float* sums, const uint16_t* bias, int64_t rows, int64_t V, float* x) {
  DSV4_GRID_LOOP(i, rows * V) {
    const float h = round_bf16(__fadd_rn(sums[i], bf16_to_f32(bias[i % V])));
    x[i] = round_bf16(__fadd_rn(x[i], h));
  }
}

__global__ void residual_kernel(const float* h, int64_t n, float* x) {
  DSV4_GRID_LOOP(i, n) x[i] = round_bf16(__fadd_rn(x[i], h[i]));
}

__global__ void bias_round_kernel(const float* sums, const uint16_t* bias, int64_t rows, int64_t cols, float* y32,
                                  uint16_t* y16) {
  DSV4_GRID_LOOP(i, rows * cols) {
    const float v = __fadd_rn(sums[i], bf16_to_f32(bias[i % cols]));
    if (y32) y32[i] = round_bf16(v);
    else y16[i] = f32_to_bf16(v);
  }
}

__global__ void swiglu_kernel(const float* g, int64_t rows, int64_t I, float* m) {
  DSV4_GRID_LOOP(i, rows * I) {
    const int64_t r = i / I, c = i - r * I;
    const float x = g[r * 2 * I + c], up = g[r * 2 * I + I + c];
    const float act = round_bf16(__fdiv_rn(x, __fadd_rn(1.0f, expf(-x))));
    m[i] = round_bf16(__fmul_rn(act, up));
  }
}

__global__ void bias_gelu_kernel(float* x, const uint16_t* bias, int64_t rows, int64_t cols) {
  const float r = 0.70710678118654752440f;
  DSV4_GRID_LOOP(i, rows * cols) {
    const float v = round_bf16(__fadd_rn(x[i], bf16_to_f32(bias[i % cols])));
    x[i] = round_bf16(__fmul_rn(__fmul_rn(v, 0.5f), __fadd_rn(1.0f, erff(__fmul_rn(v, r)))));
  }
}

}  // namespace

cudaError_t widen_bf16(const uint16_t* in, int64_t n, float* out, cudaStream_t s) {
  if (n > 0) widen_kernel<<<blocks_for(n), kThreads, 0, s>>>(in, n, out);
  return cudaGetLastError();
}

cudaError_t bias_residual(const float* sums, const uint16_t* bias, int64_t rows, int64_t V, float* x,
                          cudaStream_t s) {
  if (rows * V > 0) bias_residual_kernel<<<blocks_for(rows * V), kThreads, 0, s>>>(sums, bias, rows, V, x);
  return cudaGetLastError();
}

cudaError_t residual(const float* h, int64_t n, float* x, cudaStream_t s) {
  if (n > 0) residual_kernel<<<blocks_for(n), kThreads, 0, s>>>(h, n, x);
  return cudaGetLastError();
}

cudaError_t bias_round(const float* sums, const uint16_t* bias, int64_t rows, int64_t cols, float* y32,
                       uint16_t* y16, cudaStream_t s) {
  if ((y32 == nullptr) == (y16 == nullptr)) return cudaErrorInvalidValue;
  if (rows * cols > 0)
    bias_round_kernel<<<blocks_for(rows * cols), kThreads, 0, s>>>(sums, bias, rows, cols, y32, y16);
  return cudaGetLastError();
}

cudaError_t swiglu(const float* g, int64_t rows, int64_t I, float* m, cudaStream_t s) {
  if (rows * I > 0) swiglu_kernel<<<blocks_for(rows * I), kThreads, 0, s>>>(g, rows, I, m);
  return cudaGetLastError();
}

cudaError_t bias_gelu(float* x, const uint16_t* bias, int64_t rows, int64_t cols, cudaStream_t s) {
  if (rows * cols > 0) bias_gelu_kernel<<<blocks_for(rows * cols), kThreads, 0, s>>>(x, bias, rows, cols);
  return cudaGetLastError();
}

}  // namespace dsv4::cuda::vision
