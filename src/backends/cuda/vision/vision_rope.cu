// The vision tower's 2-D RoPE (vision_kernels.cuh rope_table, qkv_rope): the oracle's f32 table, computed
// with double cos and sin rounded to f32, and the split of the qkv linear's sums into rotated q, k and v.
#include "backends/cuda/vision/vision_kernels.cuh"

#include "core/bf16.h"

namespace dsv4::cuda::vision {
namespace {

constexpr int kThreads = 256;

__global__ void rope_table_kernel(int64_t n, int64_t grid_w, InvFreq inv, float* table) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n * 32) return;
  const int64_t p = i / 32;
  const int e = static_cast<int>(i % 32);
  const float pos = static_cast<float>(e < 16 ? p / grid_w : p % grid_w);
  const double angle = static_cast<double>(__fmul_rn(pos, inv.v[e % 16]));
  table[2 * i] = static_cast<float>(cos(angle));
  table[2 * i + 1] = static_cast<float>(sin(angle));
}

// One thread per (patch, head, i < 32): q's and k's pair (i, i + 32) and v's two values.
__global__ void qkv_rope_kernel(const float* sums, int64_t rows, int64_t V, const uint16_t* bias, const float* table,
                                uint16_t* q, uint16_t* k, uint16_t* v) {
  const int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t heads = V / 64;
  if (t >= rows * heads * 32) return;
  const int i = static_cast<int>(t % 32);
  const int64_t hp = t / 32, p = hp / heads, h = hp % heads;
  const float c = table[(p * 32 + i) * 2], s = table[(p * 32 + i) * 2 + 1];
  const float* row = sums + p * 3 * V;
  const int64_t at = h * 64 + i;
  const auto value = [&](int64_t col) { return round_bf16(__fadd_rn(row[col], bf16_to_f32(bias[col]))); };
  uint16_t* outs[2] = {q, k};
#pragma unroll
  for (int part = 0; part < 2; ++part) {
    const float a = value(part * V + at), b = value(part * V + at + 32);
    outs[part][p * V + at] = f32_to_bf16(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
    outs[part][p * V + at + 32] = f32_to_bf16(__fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s)));
  }
  v[p * V + at] = f32_to_bf16(value(2 * V + at));
  v[p * V + at + 32] = f32_to_bf16(value(2 * V + at + 32));
}

}  // namespace

cudaError_t rope_table(int64_t grid_h, int64_t grid_w, InvFreq inv, float* table, cudaStream_t s) {
  const int64_t n = grid_h * grid_w;
  if (n > 0) rope_table_kernel<<<static_cast<unsigned>((n * 32 + kThreads - 1) / kThreads), kThreads, 0, s>>>(
      n, grid_w, inv, table);
  return cudaGetLastError();
}

cudaError_t qkv_rope(const float* sums, int64_t rows, int64_t V, const uint16_t* bias, const float* table,
                     uint16_t* q, uint16_t* k, uint16_t* v, cudaStream_t s) {
  if (V % 64) return cudaErrorInvalidValue;
  const int64_t n = rows * (V / 64) * 32;
  if (n > 0)
    qkv_rope_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, s>>>(sums, rows, V, bias,
                                                                                              table, q, k, v);
  return cudaGetLastError();
}

}  // namespace dsv4::cuda::vision
