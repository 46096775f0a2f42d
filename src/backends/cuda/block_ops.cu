// Embedding, RMSNorm, mHC mixes / collapse / expand, taps, SwiGLU and row gathers (block_ops.cuh).
#include "backends/cuda/block_ops.cuh"
#include "backends/cuda/fwd_reduce.cuh"
#include "core/bf16.h"

namespace dsv4::cuda {

namespace {

constexpr int kThreads = 256;

__device__ inline float rbf16(float x) { return dsv4::round_bf16(x); }

__global__ void embed_kernel(const uint16_t* embed, const int32_t* ids, int C, int64_t D, float* h, float* pi) {
  const int64_t r = blockIdx.x;
  const uint16_t* e = embed + static_cast<int64_t>(ids[r]) * D;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    const float v = dsv4::bf16_to_f32(e[i]);
    for (int c = 0; c < C; ++c) h[(r * C + c) * D + i] = v;
  }
  if (threadIdx.x < C) pi[r * C + threadIdx.x] = threadIdx.x == 0 ? 1.0f : 0.0f;
}

__global__ void rmsnorm_kernel(const float* x, int64_t n, const float* w, float eps, float* y) {
  __shared__ float red[kThreads / 32];
  const float* xr = x + blockIdx.x * n;
  float* yr = y + blockIdx.x * n;
  float acc = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) acc += xr[i] * xr[i];
  const float sum = fwd_block_sum<kThreads>(acc, red);
  const float mean = sum / static_cast<float>(n);
  const float r = 1.0f / sqrtf(mean + eps);
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float v = xr[i] * r;
    yr[i] = rbf16(w ? w[i] * v : v);
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

constexpr int kMaxMix = 24;  // C*(C+2) for C <= 4

// Block (slice, row): partial GEMV of all nm outputs and the partial sum of squares over one slice.
__global__ void hc_partials_kernel(const float* h, const float* fn, int nm, int64_t n, float* partials) {
  const int64_t r = blockIdx.y, sl = blockIdx.x;
  const int64_t len = n / kHcSplits, i0 = sl * len;
  const float* hr = h + r * n;
  float acc[kMaxMix + 1];
#pragma unroll
  for (int j = 0; j <= kMaxMix; ++j) acc[j] = 0.0f;
  for (int64_t i = i0 + threadIdx.x; i < i0 + len; i += kThreads) {
    const float hv = hr[i];
    acc[kMaxMix] += hv * hv;
#pragma unroll
    for (int j = 0; j < kMaxMix; ++j)
      if (j < nm) acc[j] += hv * fn[j * n + i];
  }
  // The nm + 1 block sums, each with fwd_block_sum's tree (warp xor tree, then the warp partials
  // by an xor tree over a zero-padded warp), all behind one barrier.
  __shared__ float wsum[kMaxMix + 1][kThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j <= kMaxMix; ++j) {
    if (j < nm || j == kMaxMix) {
      float v = acc[j];
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      if (lane == 0) wsum[j][warp] = v;
    }
  }
  __syncthreads();
  float* out = partials + (r * kHcSplits + sl) * (nm + 1);
  for (int j = warp; j <= nm; j += kThreads / 32) {
    const int src = j < nm ? j : kMaxMix;
    float t = lane < kThreads / 32 ? wsum[src][lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    if (lane == 0) out[j] = t;
  }
}

// One warp per row: lane j sums m[j] over the slices in slice order; lane l < C*C holds A[l]
// through Sinkhorn, each row / column sum taken in the serial order of cpu::sinkhorn by shuffles.
__global__ void hc_mix_partials_kernel(const float* partials, int C, int64_t n, const float* base, float s0, float s1,
                                       float s2, float norm_eps, float eps, int iters, float* mix) {
  constexpr unsigned kAll = 0xffffffffu;
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

// One block per row: the collapse of collapse_kernel per element, then rmsnorm_kernel on it, with
// the same per-element expressions and the same per-thread accumulation order (elements t, t + 256,
// ... in turn) and block tree. The row's pre-mix sits in registers; up to kRegs elements per
// thread stay in registers for the second pass (longer rows re-read what the thread wrote).
constexpr int kCollapseRegs = 24;

__global__ void collapse_rmsnorm_kernel(const float* __restrict__ h, const float* __restrict__ pi, int64_t pi_stride,
                                        int C, int64_t D, const float* __restrict__ w, float eps, float* __restrict__ x,
                                        float* __restrict__ y) {
  __shared__ float red[kThreads / 32];
  const int64_t r = blockIdx.x;
  float p[8];
  for (int c = 0; c < C; ++c) p[c] = pi[r * pi_stride + c];
  const float* hr = h + r * C * D;
  float* xr = x + r * D;
  float* yr = y + r * D;
  float xv[kCollapseRegs];
  float acc = 0.0f;
#pragma unroll
  for (int k = 0; k < kCollapseRegs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * kThreads;
    if (i < D) {
      float s = 0.0f;
      for (int c = 0; c < C; ++c) s += p[c] * hr[c * D + i];
      xv[k] = rbf16(s);
    }
  }
#pragma unroll
  for (int k = 0; k < kCollapseRegs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * kThreads;
    if (i < D) {
      xr[i] = xv[k];
      acc += xv[k] * xv[k];
    }
  }
  for (int64_t i = threadIdx.x + static_cast<int64_t>(kCollapseRegs) * kThreads; i < D; i += kThreads) {
    float s = 0.0f;
    for (int c = 0; c < C; ++c) s += p[c] * hr[c * D + i];
    xr[i] = rbf16(s);
    acc += xr[i] * xr[i];
  }
  const float sum = fwd_block_sum<kThreads>(acc, red);
  const float mean = sum / static_cast<float>(D);
  const float rs = 1.0f / sqrtf(mean + eps);
#pragma unroll
  for (int k = 0; k < kCollapseRegs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * kThreads;
    if (i < D) {
      const float v = xv[k] * rs;
      yr[i] = rbf16(w ? w[i] * v : v);
    }
  }
  for (int64_t i = threadIdx.x + static_cast<int64_t>(kCollapseRegs) * kThreads; i < D; i += kThreads) {
    const float v = xr[i] * rs;
    yr[i] = rbf16(w ? w[i] * v : v);
  }
}

__global__ void expand_kernel(const float* y, const float* mix, int C, int64_t D, float* h) {
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
  embed_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(embed, ids, C, D, h, pi);
  return cudaGetLastError();
}

cudaError_t rmsnorm_rows(const float* x, int64_t rows, int64_t n, const float* w, float eps, float* y,
                         cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  rmsnorm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x, n, w, eps, y);
  return cudaGetLastError();
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

cudaError_t hc_mix_partials(const float* h, const float* fn, int64_t rows, int C, int64_t D, float* partials,
                            cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  const int64_t n = static_cast<int64_t>(C) * D;
  if (C * (C + 2) > kMaxMix || n % kHcSplits) return cudaErrorInvalidValue;
  hc_partials_kernel<<<dim3(kHcSplits, static_cast<unsigned>(rows)), kThreads, 0, s>>>(h, fn, C * (C + 2), n, partials);
  return cudaGetLastError();
}

cudaError_t hc_mix_from_partials(const float* partials, int64_t rows, int C, int64_t D, const float* base, float s0,
                                 float s1, float s2, float norm_eps, float hc_eps, int iters, float* mix,
                                 cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (C * (C + 2) > kMaxMix) return cudaErrorInvalidValue;
  hc_mix_partials_kernel<<<static_cast<unsigned>(rows), 32, 0, s>>>(
      partials, C, static_cast<int64_t>(C) * D, base, s0, s1, s2, norm_eps, hc_eps, iters, mix);
  return cudaGetLastError();
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
  collapse_rmsnorm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(h, pi, pi_stride, C, D, w, eps, x, y);
  return cudaGetLastError();
}

cudaError_t hc_expand(const float* y, const float* mix, int64_t rows, int C, int64_t D, float* h, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (C > 8) return cudaErrorInvalidValue;
  expand_kernel<<<row_grid(D, rows), kThreads, 0, s>>>(y, mix, C, D, h);
  return cudaGetLastError();
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
