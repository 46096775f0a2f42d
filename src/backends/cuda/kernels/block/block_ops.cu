// Embedding, RMSNorm, mHC mixes / collapse / expand, taps, SwiGLU and row gathers (block_ops.cuh).
#include "backends/cuda/kernels/block/block_ops.cuh"
#include "backends/cuda/kernels/block/fwd_reduce.cuh"
#include "backends/cuda/kernels/block/hc_expand4.cuh"
#include "backends/cuda/runtime/pdl.cuh"
#include "core/bf16.h"

#include <algorithm>

namespace dsv4::cuda {

namespace {

constexpr int kThreads = 256;

__device__ inline float rbf16(float x) { return dsv4::round_bf16(x); }

// Block (chunk, row): element i of row r copied into the C streams; chunk 0 writes the pre-mix.
__global__ void embed_kernel(const uint16_t* embed, const int32_t* ids, int C, int64_t D, float* h, float* pi) {
  const int64_t r = blockIdx.y;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (blockIdx.x == 0 && threadIdx.x < C) pi[r * C + threadIdx.x] = threadIdx.x == 0 ? 1.0f : 0.0f;
  if (i >= D) return;
  const float v = dsv4::bf16_to_f32(embed[static_cast<int64_t>(ids[r]) * D + i]);
  for (int c = 0; c < C; ++c) h[(r * C + c) * D + i] = v;
}

// Block (chunk, k): given row k written into call row rows[k]'s C streams.
__global__ void embed_given_kernel(const uint16_t* values, const int64_t* rows, int C, int64_t D, float* h) {
  const int64_t k = blockIdx.y;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= D) return;
  const float v = dsv4::bf16_to_f32(values[k * D + i]);
  const int64_t r = rows[k];
  for (int c = 0; c < C; ++c) h[(r * C + c) * D + i] = v;
}

// RMSNorm of one row's values, optionally the mHC collapse of the row's kC streams first (kC = 0:
// the values are x itself). Every block of row r computes the row's whole sum of squares in the
// one-block order — thread t takes elements t, t + 256, ... in turn (acc += v * v), then
// fwd_block_sum — so a row's bits do not depend on how many blocks share it; block b then writes
// the elements of slots [b * kper, (b + 1) * kper) of each thread. The first K slots stay in
// registers and all their loads are issued before any arithmetic (out-of-range slots read the
// row's last element and are dropped); longer rows recompute their tail from memory.
template <int kC, int K>
__global__ void __launch_bounds__(kThreads) norm_rows_kernel(const float* src, const float* __restrict__ pi,
                                                             int64_t pi_stride, int64_t D, const float* __restrict__ w,
                                                             float eps, int kper, float* x, float* y) {
  __shared__ float red[kThreads / 32];
  pdl_wait();
  pdl_launch_dependents();
  const int64_t r = blockIdx.y;
  const int t = threadIdx.x;
  float p[kC > 0 ? kC : 1];
#pragma unroll
  for (int c = 0; c < kC; ++c) p[c] = pi[r * pi_stride + c];
  const float* row = src + r * (kC > 0 ? kC : 1) * D;
  auto value = [&](int64_t i) {  // collapse_kernel's expression, or the plain value
    if constexpr (kC > 0) {
      float s = 0.0f;
#pragma unroll
      for (int c = 0; c < kC; ++c) s += p[c] * row[c * D + i];
      return rbf16(s);
    } else {
      return row[i];
    }
  };
  float v[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t i = t + static_cast<int64_t>(k) * kThreads;
    v[k] = value(i < D ? i : D - 1);
  }
  float acc = 0.0f;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t i = t + static_cast<int64_t>(k) * kThreads;
    if (i < D) acc += v[k] * v[k];
  }
  for (int64_t i = t + static_cast<int64_t>(K) * kThreads; i < D; i += kThreads) {
    const float e = value(i);
    acc += e * e;
  }
  const float sum = fwd_block_sum<kThreads>(acc, red);
  const float mean = sum / static_cast<float>(D);
  const float rs = 1.0f / sqrtf(mean + eps);
  const int k0 = static_cast<int>(blockIdx.x) * kper, k1 = k0 + kper;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t i = t + static_cast<int64_t>(k) * kThreads;
    if (k >= k0 && k < k1 && i < D) {
      if constexpr (kC > 0) x[r * D + i] = v[k];
      const float e = v[k] * rs;
      y[r * D + i] = rbf16(w ? w[i] * e : e);
    }
  }
  for (int k = k0 > K ? k0 : K; k < k1; ++k) {  // the tail beyond the held slots, recomputed
    const int64_t i = t + static_cast<int64_t>(k) * kThreads;
    if (i >= D) break;
    const float val = value(i);
    if constexpr (kC > 0) x[r * D + i] = val;
    const float e = val * rs;
    y[r * D + i] = rbf16(w ? w[i] * e : e);
  }
}

__device__ inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

// Coefficients of one row from m [nm] and the row's sum of squares (one thread; cpu::hc_mixes).
__device__ void hc_coefficients(const float* mr, float sum, int C, int64_t n, const float* base, float s0, float s1,
                                float s2, float norm_eps, float eps, int iters, float* o) {
  const float mean = sum / static_cast<float>(n);
  const float rho = 1.0f / sqrtf(mean + norm_eps);
  float* A = o + 2 * C;
  for (int j = 0; j < C; ++j) {
    o[j] = sigmoidf(mr[j] * rho * s0 + base[j]) + eps;
    o[C + j] = 2.0f * sigmoidf(mr[C + j] * rho * s1 + base[C + j]);
  }
  for (int i = 0; i < C * C; ++i) A[i] = mr[2 * C + i] * rho * s2 + base[2 * C + i];
  // Sinkhorn (cpu::sinkhorn): row softmax + eps, column normalisation, (iters-1) x {row, column}.
  for (int j = 0; j < C; ++j) {
    float mx = A[j * C];
    for (int k = 1; k < C; ++k) mx = fmaxf(mx, A[j * C + k]);
    float s = 0.0f;
    for (int k = 0; k < C; ++k) { A[j * C + k] = expf(A[j * C + k] - mx); s += A[j * C + k]; }
    for (int k = 0; k < C; ++k) A[j * C + k] = A[j * C + k] / s + eps;
  }
  for (int it = 0; it < iters; ++it) {
    if (it > 0)
      for (int j = 0; j < C; ++j) {
        float s = 0.0f;
        for (int k = 0; k < C; ++k) s += A[j * C + k];
        for (int k = 0; k < C; ++k) A[j * C + k] = A[j * C + k] / (s + eps);
      }
    for (int k = 0; k < C; ++k) {
      float s = 0.0f;
      for (int j = 0; j < C; ++j) s += A[j * C + k];
      for (int j = 0; j < C; ++j) A[j * C + k] = A[j * C + k] / (s + eps);
    }
  }
}

// One block per row: rho from the row's sum of squares, then one thread forms the C*(C+2) mixes.
__global__ void hc_mix_kernel(const float* m, const float* h, int C, int64_t D, const float* base, float s0,
                              float s1, float s2, float norm_eps, float eps, int iters, float* mix) {
  __shared__ float red[kThreads / 32];
  const int64_t r = blockIdx.x, n = static_cast<int64_t>(C) * D, nm = static_cast<int64_t>(C) * (C + 2);
  const float* hr = h + r * n;
  float acc = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) acc += hr[i] * hr[i];
  const float sum = fwd_block_sum<kThreads>(acc, red);
  if (threadIdx.x != 0) return;
  hc_coefficients(m + r * nm, sum, C, n, base, s0, s1, s2, norm_eps, eps, iters, mix + r * nm);
}

constexpr int kMaxMix = kHcMaxMix;

// One warp per row: lane j sums m[j] over the slices in slice order; lane l < C*C holds A[l]
// through Sinkhorn, each row / column sum taken in the serial order of cpu::sinkhorn by shuffles.
// kC > 0: C is kC at compile time (the shuffles of each sum unrolled and issued together; the same
// additions in the same order as the runtime-C form).
template <int kC>
__global__ void hc_mix_partials_kernel(const float* partials, int C_, int64_t n, const float* base, float s0, float s1,
                                       float s2, float norm_eps, float eps, int iters, float* mix) {
  constexpr unsigned kAll = 0xffffffffu;
  pdl_wait();
  pdl_launch_dependents();
  const int C = kC > 0 ? kC : C_;
  const int64_t r = blockIdx.x;
  const int lane = threadIdx.x, nm = C * (C + 2);
  float mj = 0.0f;
  if (lane <= nm)
    for (int sl = 0; sl < kHcSplits; ++sl) mj += partials[(r * kHcSplits + sl) * (nm + 1) + lane];
  const float sum = __shfl_sync(kAll, mj, nm);
  const float rho = 1.0f / sqrtf(sum / static_cast<float>(n) + norm_eps);
  float* o = mix + r * nm;
  if (lane < C) o[lane] = sigmoidf(mj * rho * s0 + base[lane]) + eps;
  else if (lane < 2 * C) o[lane] = 2.0f * sigmoidf(mj * rho * s1 + base[lane]);
  const float ma = __shfl_sync(kAll, mj, (2 * C + lane) & 31);
  const bool mine = lane < C * C;
  float a = mine ? ma * rho * s2 + base[2 * C + lane] : 0.0f;
  const int j = mine ? lane / C : 0, k = mine ? lane % C : 0;
  auto row_sum = [&](float v) {
    float t = 0.0f;
    for (int q = 0; q < C; ++q) t += __shfl_sync(kAll, v, j * C + q);
    return t;
  };
  auto col_sum = [&](float v) {
    float t = 0.0f;
    for (int q = 0; q < C; ++q) t += __shfl_sync(kAll, v, q * C + k);
    return t;
  };
  float mx = __shfl_sync(kAll, a, j * C);
  for (int q = 1; q < C; ++q) mx = fmaxf(mx, __shfl_sync(kAll, a, j * C + q));
  a = expf(a - mx);
  a = a / row_sum(a) + eps;
  for (int it = 0; it < iters; ++it) {
    if (it > 0) a = a / (row_sum(a) + eps);
    a = a / (col_sum(a) + eps);
  }
  if (mine) o[2 * C + lane] = a;
}

__global__ void collapse_kernel(const float* h, const float* pi, int64_t pi_stride, int C, int64_t D, float* y) {
  const int64_t r = blockIdx.y;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= D) return;
  const float* p = pi + r * pi_stride;
  float s = 0.0f;
  for (int c = 0; c < C; ++c) s += p[c] * h[(r * C + c) * D + i];
  y[r * D + i] = rbf16(s);
}

__global__ void expand_kernel(const float* y, const float* mix, int C, int64_t D, float* h) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t r = blockIdx.y;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= D) return;
  const float* o = mix + r * static_cast<int64_t>(C) * (C + 2);
  const float* post = o + C;
  const float* A = o + 2 * C;
  float hv[8];
  for (int j = 0; j < C; ++j) hv[j] = h[(r * C + j) * D + i];
  const float yv = y[r * D + i];
  for (int k = 0; k < C; ++k) {
    float s = 0.0f;
    for (int j = 0; j < C; ++j) s += A[j * C + k] * hv[j];
    h[(r * C + k) * D + i] = rbf16(post[k] * yv + s);
  }
}

// expand_kernel for C = 4 and D % 4 == 0: four elements per thread, the same operations per element.
__global__ void expand4_kernel(const float* y, const float* mix, int64_t D, float* h) {
  constexpr int kC = 4;
  pdl_wait();
  pdl_launch_dependents();
  const int64_t r = blockIdx.y;
  const int64_t i = 4 * (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x);
  if (i >= D) return;
  const float4 v = *reinterpret_cast<const float4*>(y + r * D + i);
  const float yv[4] = {v.x, v.y, v.z, v.w};
  hc_expand4<kC>(h, r, D, i, yv, mix + r * static_cast<int64_t>(kC) * (kC + 2));
}

__global__ void take_pre_kernel(const float* mix, int64_t rows, int C, float* pi) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= rows * C) return;
  const int64_t r = t / C, c = t % C;
  pi[t] = mix[r * static_cast<int64_t>(C) * (C + 2) + c];
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
  pdl_wait();
  pdl_launch_dependents();
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

// Blocks a launch of norm_rows_kernel aims at (about two per SM of a large GPU): a row of few rows
// is spread over up to one block per slot. Speed only: a row's bits do not depend on it.
constexpr int64_t kNormBlocks = 256;

template <int kC, int K>
cudaError_t launch_norm_rows(const float* src, const float* pi, int64_t pi_stride, int64_t rows, int64_t D,
                             const float* w, float eps, bool spread, float* x, float* y, cudaStream_t s) {
  const int64_t slots = (D + kThreads - 1) / kThreads;
  const int64_t want = spread ? std::clamp<int64_t>((kNormBlocks + rows - 1) / rows, 1, slots) : 1;
  const int64_t kper = (slots + want - 1) / want;
  const dim3 grid(static_cast<unsigned>((slots + kper - 1) / kper), static_cast<unsigned>(rows));
  return launch_pdl(norm_rows_kernel<kC, K>, grid, dim3(kThreads), 0, s, src, pi, pi_stride, D, w, eps,
                    static_cast<int>(kper), x, y);
}

// The smallest held-slot count covering D (24 at most: longer rows take the kernel's tail path).
template <int kC>
cudaError_t norm_rows(const float* src, const float* pi, int64_t pi_stride, int64_t rows, int64_t D, const float* w,
                      float eps, bool spread, float* x, float* y, cudaStream_t s) {
  const int64_t slots = (D + kThreads - 1) / kThreads;
  if (slots <= 1) return launch_norm_rows<kC, 1>(src, pi, pi_stride, rows, D, w, eps, spread, x, y, s);
  if (slots <= 2) return launch_norm_rows<kC, 2>(src, pi, pi_stride, rows, D, w, eps, spread, x, y, s);
  if (slots <= 4) return launch_norm_rows<kC, 4>(src, pi, pi_stride, rows, D, w, eps, spread, x, y, s);
  if (slots <= 8) return launch_norm_rows<kC, 8>(src, pi, pi_stride, rows, D, w, eps, spread, x, y, s);
  if (slots <= 16) return launch_norm_rows<kC, 16>(src, pi, pi_stride, rows, D, w, eps, spread, x, y, s);
  if (slots <= 20) return launch_norm_rows<kC, 20>(src, pi, pi_stride, rows, D, w, eps, spread, x, y, s);
  return launch_norm_rows<kC, 24>(src, pi, pi_stride, rows, D, w, eps, spread, x, y, s);
}

}  // namespace

cudaError_t embed_streams(const uint16_t* embed, const int32_t* ids, int64_t rows, int C, int64_t D, float* h,
                          float* pi, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (C > kThreads) return cudaErrorInvalidValue;
  embed_kernel<<<row_grid(D, rows), kThreads, 0, s>>>(embed, ids, C, D, h, pi);
  return cudaGetLastError();
}

cudaError_t embed_given(const uint16_t* values, const int64_t* rows, int64_t n, int C, int64_t D, float* h,
                        cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  embed_given_kernel<<<row_grid(D, n), kThreads, 0, s>>>(values, rows, C, D, h);
  return cudaGetLastError();
}

cudaError_t rmsnorm_rows(const float* x, int64_t rows, int64_t n, const float* w, float eps, float* y,
                         cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (n <= 0) return cudaErrorInvalidValue;
  return norm_rows<0>(x, nullptr, 0, rows, n, w, eps, /*spread=*/x != y, nullptr, y, s);  // in place: one block a row
}

cudaError_t hc_mix_coefficients(const float* m, const float* h, int64_t rows, int C, int64_t D, const float* base,
                                float s0, float s1, float s2, float norm_eps, float hc_eps, int iters, float* mix,
                                cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (C > 8) return cudaErrorInvalidValue;
  hc_mix_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(m, h, C, D, base, s0, s1, s2, norm_eps, hc_eps,
                                                                  iters, mix);
  return cudaGetLastError();
}

cudaError_t hc_mix_from_partials(const float* partials, int64_t rows, int C, int64_t D, const float* base, float s0,
                                 float s1, float s2, float norm_eps, float hc_eps, int iters, float* mix,
                                 cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (C * (C + 2) > kMaxMix) return cudaErrorInvalidValue;
  return launch_pdl(C == 4 ? hc_mix_partials_kernel<4> : hc_mix_partials_kernel<0>, dim3(static_cast<unsigned>(rows)),
                    dim3(32), 0, s, partials, C, static_cast<int64_t>(C) * D, base, s0, s1, s2, norm_eps, hc_eps, iters,
                    mix);
}

cudaError_t hc_collapse(const float* h, const float* pi, int64_t pi_stride, int64_t rows, int C, int64_t D,
                        float* y, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  collapse_kernel<<<row_grid(D, rows), kThreads, 0, s>>>(h, pi, pi_stride, C, D, y);
  return cudaGetLastError();
}

cudaError_t hc_collapse_rmsnorm(const float* h, const float* pi, int64_t pi_stride, int64_t rows, int C, int64_t D,
                                const float* w, float eps, float* x, float* y, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (D <= 0) return cudaErrorInvalidValue;
  switch (C) {
    case 1: return norm_rows<1>(h, pi, pi_stride, rows, D, w, eps, true, x, y, s);
    case 2: return norm_rows<2>(h, pi, pi_stride, rows, D, w, eps, true, x, y, s);
    case 3: return norm_rows<3>(h, pi, pi_stride, rows, D, w, eps, true, x, y, s);
    case 4: return norm_rows<4>(h, pi, pi_stride, rows, D, w, eps, true, x, y, s);
    default: return cudaErrorInvalidValue;  // the family's hc_mult is 4
  }
}

cudaError_t hc_expand(const float* y, const float* mix, int64_t rows, int C, int64_t D, float* h, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (C > 8) return cudaErrorInvalidValue;
  if (C == 4 && D % 4 == 0 && ((reinterpret_cast<uintptr_t>(y) | reinterpret_cast<uintptr_t>(h)) & 15) == 0)
    return launch_pdl(expand4_kernel, row_grid(D / 4, rows), dim3(kThreads), 0, s, y, mix, D, h);
  return launch_pdl(expand_kernel, row_grid(D, rows), dim3(kThreads), 0, s, y, mix, C, D, h);
}

cudaError_t hc_take_pre(const float* mix, int64_t rows, int C, float* pi, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  const int64_t n = rows * C;
  take_pre_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, s>>>(mix, rows, C, pi);
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
  return launch_pdl(swiglu_kernel, dim3(static_cast<unsigned>((n + kThreads - 1) / kThreads)), dim3(kThreads), 0, s, a,
                    u, n, limit, v);
}

cudaError_t gather_rows(const float* in, const int64_t* index, int64_t n, int64_t width, float* out,
                        cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  gather_kernel<<<row_grid(width, n), kThreads, 0, s>>>(in, index, width, out);
  return cudaGetLastError();
}

}  // namespace dsv4::cuda
