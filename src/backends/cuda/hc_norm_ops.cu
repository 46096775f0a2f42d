// RMSNorm and mHC on the device (declared in block_ops.cuh): the mixes' GEMV and row statistics in
// fixed 32-column slices spread over many blocks, Sinkhorn, collapse, expand, take-pre.
#include "backends/cuda/block_ops.cuh"
#include "backends/cuda/fwd_reduce.cuh"
#include "core/bf16.h"

namespace dsv4::cuda {

namespace {

constexpr unsigned kAll = 0xffffffffu;
constexpr int kThreads = 256;
constexpr int kMaxMix = 24;       // C*(C+2) for C <= 4
constexpr int kPass1Rows = 8;     // rows per partials block: the fn slice is loaded once for them
constexpr int kNormThreads = 512;  // one block per row for the single-launch norms
constexpr int kNormHeld = 12;      // slices per warp held in registers between the two passes
constexpr int kApplyCols = 4 * kThreads;  // columns per normalising block of hc_norm_and_mix

__device__ inline float rbf16(float x) { return dsv4::round_bf16(x); }
__device__ inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ inline float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }

// The collapse of one element, cpu::hc_collapse's order: bf16(sum_c p_c * h_c), products and sums
// rounded separately. h_c at h[c * stride].
__device__ inline float collapse_elem(const float* p, int C, const float* h, int64_t stride) {
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < 8; ++c) {
    if (c >= C) break;
    s = __fadd_rn(s, __fmul_rn(p[c], h[c * stride]));
  }
  return rbf16(s);
}

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

// Block (slice s, kPass1Rows rows), 8 warps. Lane (c = lane / 8, q = lane % 8) holds the four
// columns 32 s + 4q .. + 3 of stream c. Warp w forms partial j = w, w + 8, w + 16, w + 24: for
// j < nm the GEMV output j over the slice's C * 32 inputs (fn row j kept in registers for all the
// block's rows), for j == nm the slice's sum of h^2. With pi, warp 7 also collapses the slice and
// forms its sum of x^2 (partial nm + 1) with the element-per-lane tree of fwd_slice_sumsq.
__global__ void __launch_bounds__(kThreads) hc_pass1_kernel(const float* __restrict__ h, const float* __restrict__ fn,
                                                            int64_t rows, int C, int64_t D, const float* __restrict__ pi,
                                                            int64_t pi_stride, float* __restrict__ part,
                                                            float* __restrict__ x) {
  const int S = static_cast<int>(D / kFwdSlice), s = blockIdx.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, c = lane >> 3, q = lane & 7;
  const bool active = c < C;
  const int nm = C * (C + 2);
  const int64_t n = static_cast<int64_t>(C) * D;
  const int64_t col = c * D + static_cast<int64_t>(s) * kFwdSlice + 4 * q;  // the lane's first input column
  const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float4 f[4];
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    const int j = warp + 8 * t;
    f[t] = active && j < nm ? ld4(fn + j * n + col) : zero;
  }
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kPass1Rows;
  const int64_t r1 = r0 + kPass1Rows < rows ? r0 + kPass1Rows : rows;
  for (int64_t r = r0; r < r1; ++r) {
    const float4 hv = active ? ld4(h + r * n + col) : zero;
    float* out = part + (r * S + s) * kHcPartStride;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const int j = warp + 8 * t;
      if (j > nm) break;  // warp-uniform
      const float4 g = j < nm ? f[t] : hv;
      const float v = fwd_warp_sum(fmaf(hv.w, g.w, fmaf(hv.z, g.z, fmaf(hv.y, g.y, __fmul_rn(hv.x, g.x)))));
      if (lane == 0) out[j] = v;
    }
    if (pi && warp == 7) {
      float p[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) p[k] = k < C ? pi[r * pi_stride + k] : 0.0f;
      // Element 4q + t of the slice, the streams in order c = 0 .. C-1 (collapse_elem's order).
      float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        if (k >= C) break;
        const int src = k * 8 + q;
        a[0] = __fadd_rn(a[0], __fmul_rn(p[k], __shfl_sync(kAll, hv.x, src)));
        a[1] = __fadd_rn(a[1], __fmul_rn(p[k], __shfl_sync(kAll, hv.y, src)));
        a[2] = __fadd_rn(a[2], __fmul_rn(p[k], __shfl_sync(kAll, hv.z, src)));
        a[3] = __fadd_rn(a[3], __fmul_rn(p[k], __shfl_sync(kAll, hv.w, src)));
      }
      const float4 xs = make_float4(rbf16(a[0]), rbf16(a[1]), rbf16(a[2]), rbf16(a[3]));
      if (lane < 8) *reinterpret_cast<float4*>(x + r * D + static_cast<int64_t>(s) * kFwdSlice + 4 * lane) = xs;
      // Element e of the slice to lane e: it sits in lane e / 4, component e % 4.
      const float e0 = __shfl_sync(kAll, xs.x, lane >> 2), e1 = __shfl_sync(kAll, xs.y, lane >> 2);
      const float e2 = __shfl_sync(kAll, xs.z, lane >> 2), e3 = __shfl_sync(kAll, xs.w, lane >> 2);
      const int k = lane & 3;
      const float ss = fwd_slice_sumsq(k == 0 ? e0 : k == 1 ? e1 : k == 2 ? e2 : e3);
      if (lane == 0) out[nm + 1] = ss;
    }
  }
}

// The mix of one row from its partials, by one block of kThreads: m[j] (j <= nm) = fwd_slices_sum
// of partial j, then warp 0 forms the coefficients, lane l < C*C holding A[l] through Sinkhorn
// (each row / column sum in the serial order of cpu::sinkhorn, by shuffles).
__device__ void mix_block(const float* part, int S, int C, int64_t n, const float* base, float s0, float s1, float s2,
                          float norm_eps, float eps, int iters, float* o) {
  __shared__ float m[kMaxMix + 1];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nm = C * (C + 2);
  for (int j = warp; j <= nm; j += kThreads / 32) {
    const float v = fwd_slices_sum(part + j, kHcPartStride, S);
    if (lane == 0) m[j] = v;
  }
  __syncthreads();
  if (warp != 0) return;
  const float mj = lane <= nm ? m[lane] : 0.0f;
  const float sum = m[nm];
  const float rho = 1.0f / sqrtf(sum / static_cast<float>(n) + norm_eps);
  if (lane < C) o[lane] = sigmoidf(mj * rho * s0 + base[lane]) + eps;
  else if (lane < 2 * C) o[lane] = 2.0f * sigmoidf(mj * rho * s1 + base[lane]);
  const float ma = __shfl_sync(kAll, mj, (2 * C + lane) & 31);
  const bool mine = lane < C * C;
  float a = mine ? ma * rho * s2 + base[2 * C + lane] : 0.0f;
  const int j = mine ? lane / C : 0, k = mine ? lane % C : 0;
  auto row_sum = [&](float v) {
    float t = 0.0f;
    for (int u = 0; u < C; ++u) t += __shfl_sync(kAll, v, j * C + u);
    return t;
  };
  auto col_sum = [&](float v) {
    float t = 0.0f;
    for (int u = 0; u < C; ++u) t += __shfl_sync(kAll, v, u * C + k);
    return t;
  };
  float mx = __shfl_sync(kAll, a, j * C);
  for (int u = 1; u < C; ++u) mx = fmaxf(mx, __shfl_sync(kAll, a, j * C + u));
  a = expf(a - mx);
  a = a / row_sum(a) + eps;
  for (int it = 0; it < iters; ++it) {
    if (it > 0) a = a / (row_sum(a) + eps);
    a = a / (col_sum(a) + eps);
  }
  if (mine) o[2 * C + lane] = a;
}

__global__ void __launch_bounds__(kThreads) hc_mix_from_partials_kernel(const float* part, int C, int64_t D,
                                                                        const float* base, float s0, float s1, float s2,
                                                                        float norm_eps, float eps, int iters, float* mix) {
  const int64_t r = blockIdx.x;
  const int S = static_cast<int>(D / kFwdSlice), nm = C * (C + 2);
  mix_block(part + r * S * kHcPartStride, S, C, static_cast<int64_t>(C) * D, base, s0, s1, s2, norm_eps, eps, iters,
            mix + r * nm);
}

// Blocks (b < A, r): columns [b * kApplyCols, ...) of row r normalised with the statistic of the
// partials; block (A, r): the row's mix (mix_block).
__global__ void __launch_bounds__(kThreads) hc_norm_mix_kernel(const float* __restrict__ part,
                                                               const float* __restrict__ x, int C, int64_t D,
                                                               const float* __restrict__ w, float eps, const float* base,
                                                               float s0, float s1, float s2, float norm_eps, float hc_eps,
                                                               int iters, float* __restrict__ y, float* __restrict__ mix) {
  const int64_t r = blockIdx.y;
  const int S = static_cast<int>(D / kFwdSlice), nm = C * (C + 2);
  const float* pr = part + r * S * kHcPartStride;
  if (blockIdx.x == gridDim.x - 1) {
    mix_block(pr, S, C, static_cast<int64_t>(C) * D, base, s0, s1, s2, norm_eps, hc_eps, iters, mix + r * nm);
    return;
  }
  __shared__ float total;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kApplyCols + 4 * threadIdx.x;
  const float4 xv = i < D ? ld4(x + r * D + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (threadIdx.x < 32) {
    const float t = fwd_slices_sum(pr + nm + 1, kHcPartStride, S);
    if (threadIdx.x == 0) total = t;
  }
  __syncthreads();
  if (i >= D) return;
  const float rs = fwd_rms_scale(total, D, eps);
  const float4 yv = make_float4(fwd_norm_elem(xv.x, w, i, rs), fwd_norm_elem(xv.y, w, i + 1, rs),
                                fwd_norm_elem(xv.z, w, i + 2, rs), fwd_norm_elem(xv.w, w, i + 3, rs));
  *reinterpret_cast<float4*>(y + r * D + i) = yv;
}

// One block of kNormThreads per row: the row's values (collapsed from h with pi, or read from
// src), each 32-value slice's fwd_slice_sumsq into shared memory, fwd_slices_sum over them, then
// the normalised row. Up to kNormHeld slices per warp stay in registers (all their loads in
// flight at once); longer rows re-read their values.
template <bool kCollapse>
__global__ void __launch_bounds__(kNormThreads) norm_rows_kernel(const float* src,
                                                                 const float* __restrict__ pi, int64_t pi_stride, int C,
                                                                 int64_t n, const float* __restrict__ w, float eps,
                                                                 float* x, float* y) {
  extern __shared__ float part[];  // [S]
  __shared__ float total;
  constexpr int kWarps = kNormThreads / 32;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int S = static_cast<int>((n + kFwdSlice - 1) / kFwdSlice);
  const int64_t r = blockIdx.x;
  float p[8];
#pragma unroll
  for (int c = 0; c < 8; ++c) p[c] = kCollapse && c < C ? pi[r * pi_stride + c] : 0.0f;
  const float* row = kCollapse ? src + r * C * n : src + r * n;
  auto value = [&](int64_t e) { return kCollapse ? collapse_elem(p, C, row + e, n) : row[e]; };
  float v[kNormHeld];
#pragma unroll
  for (int k = 0; k < kNormHeld; ++k) {
    const int64_t e = static_cast<int64_t>(warp + kWarps * k) * kFwdSlice + lane;
    v[k] = e < n ? value(e) : 0.0f;
  }
#pragma unroll
  for (int k = 0; k < kNormHeld; ++k) {
    const int s = warp + kWarps * k;
    if (s >= S) break;
    const int64_t e = static_cast<int64_t>(s) * kFwdSlice + lane;
    if (kCollapse && e < n) x[r * n + e] = v[k];
    const float ss = fwd_slice_sumsq(v[k]);
    if (lane == 0) part[s] = ss;
  }
  for (int s = warp + kWarps * kNormHeld; s < S; s += kWarps) {
    const int64_t e = static_cast<int64_t>(s) * kFwdSlice + lane;
    const float ve = e < n ? value(e) : 0.0f;
    if (kCollapse && e < n) x[r * n + e] = ve;
    const float ss = fwd_slice_sumsq(ve);
    if (lane == 0) part[s] = ss;
  }
  __syncthreads();
  if (warp == 0) {
    const float t = fwd_slices_sum(part, 1, S);
    if (lane == 0) total = t;
  }
  __syncthreads();
  const float rs = fwd_rms_scale(total, n, eps);
#pragma unroll
  for (int k = 0; k < kNormHeld; ++k) {
    const int64_t e = static_cast<int64_t>(warp + kWarps * k) * kFwdSlice + lane;
    if (e < n) y[r * n + e] = fwd_norm_elem(v[k], w, e, rs);
  }
  for (int s = warp + kWarps * kNormHeld; s < S; s += kWarps) {
    const int64_t e = static_cast<int64_t>(s) * kFwdSlice + lane;
    if (e < n) y[r * n + e] = fwd_norm_elem(kCollapse ? x[r * n + e] : row[e], w, e, rs);
  }
}

__global__ void collapse_kernel(const float* h, const float* pi, int64_t pi_stride, int C, int64_t D, float* y) {
  const int64_t r = blockIdx.y;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= D) return;
  float p[8];
#pragma unroll
  for (int c = 0; c < 8; ++c) p[c] = c < C ? pi[r * pi_stride + c] : 0.0f;
  y[r * D + i] = collapse_elem(p, C, h + r * C * D + i, D);
}

__global__ void expand_kernel(const float* y, const float* mix, int C, int64_t D, float* h) {
  const int64_t r = blockIdx.y;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= D) return;
  float hv[8], out[8];
#pragma unroll
  for (int j = 0; j < 8; ++j)
    if (j < C) hv[j] = h[(r * C + j) * D + i];
  fwd_expand_elem(mix + r * static_cast<int64_t>(C) * (C + 2), C, y[r * D + i], hv, out);
#pragma unroll
  for (int k = 0; k < 8; ++k)
    if (k < C) h[(r * C + k) * D + i] = out[k];
}

__global__ void take_pre_kernel(const float* mix, int64_t rows, int C, float* pi) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= rows * C) return;
  const int64_t r = t / C, c = t % C;
  pi[t] = mix[r * static_cast<int64_t>(C) * (C + 2) + c];
}

inline dim3 row_grid(int64_t width, int64_t rows) {
  return dim3(static_cast<unsigned>((width + kThreads - 1) / kThreads), static_cast<unsigned>(rows));
}

inline size_t norm_smem(int64_t n) { return static_cast<size_t>((n + kFwdSlice - 1) / kFwdSlice) * sizeof(float); }

bool pass1_shape_ok(int C, int64_t D) { return C >= 1 && C * (C + 2) <= kMaxMix && D % kFwdSlice == 0; }

}  // namespace

cudaError_t rmsnorm_rows(const float* x, int64_t rows, int64_t n, const float* w, float eps, float* y,
                         cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (norm_smem(n) > 48 * 1024) return cudaErrorInvalidValue;
  norm_rows_kernel<false><<<static_cast<unsigned>(rows), kNormThreads, norm_smem(n), s>>>(x, nullptr, 0, 1, n, w, eps,
                                                                                          nullptr, y);
  return cudaGetLastError();
}

cudaError_t hc_collapse_rmsnorm(const float* h, const float* pi, int64_t pi_stride, int64_t rows, int C, int64_t D,
                                const float* w, float eps, float* x, float* y, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (C > 8 || norm_smem(D) > 48 * 1024) return cudaErrorInvalidValue;
  norm_rows_kernel<true><<<static_cast<unsigned>(rows), kNormThreads, norm_smem(D), s>>>(h, pi, pi_stride, C, D, w, eps,
                                                                                         x, y);
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

cudaError_t hc_mix_collapse_partials(const float* h, const float* fn, const float* pi, int64_t pi_stride, int64_t rows,
                                     int C, int64_t D, float* partials, float* x, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (!pass1_shape_ok(C, D)) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(D / kFwdSlice), static_cast<unsigned>((rows + kPass1Rows - 1) / kPass1Rows));
  hc_pass1_kernel<<<grid, kThreads, 0, s>>>(h, fn, rows, C, D, pi, pi_stride, partials, x);
  return cudaGetLastError();
}

cudaError_t hc_mix_partials(const float* h, const float* fn, int64_t rows, int C, int64_t D, float* partials,
                            cudaStream_t s) {
  return hc_mix_collapse_partials(h, fn, nullptr, 0, rows, C, D, partials, nullptr, s);
}

cudaError_t hc_mix_from_partials(const float* partials, int64_t rows, int C, int64_t D, const float* base, float s0,
                                 float s1, float s2, float norm_eps, float hc_eps, int iters, float* mix,
                                 cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (!pass1_shape_ok(C, D)) return cudaErrorInvalidValue;
  hc_mix_from_partials_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(partials, C, D, base, s0, s1, s2,
                                                                               norm_eps, hc_eps, iters, mix);
  return cudaGetLastError();
}

cudaError_t hc_norm_and_mix(const float* partials, const float* x, int64_t rows, int C, int64_t D, const float* w,
                            float eps, const float* base, float s0, float s1, float s2, float norm_eps, float hc_eps,
                            int iters, float* y, float* mix, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (!pass1_shape_ok(C, D)) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((D + kApplyCols - 1) / kApplyCols + 1), static_cast<unsigned>(rows));
  hc_norm_mix_kernel<<<grid, kThreads, 0, s>>>(partials, x, C, D, w, eps, base, s0, s1, s2, norm_eps, hc_eps, iters, y,
                                               mix);
  return cudaGetLastError();
}

cudaError_t hc_collapse(const float* h, const float* pi, int64_t pi_stride, int64_t rows, int C, int64_t D,
                        float* y, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (C > 8) return cudaErrorInvalidValue;
  collapse_kernel<<<row_grid(D, rows), kThreads, 0, s>>>(h, pi, pi_stride, C, D, y);
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

}  // namespace dsv4::cuda
