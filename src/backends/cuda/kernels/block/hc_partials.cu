// The mixes' fp32 GEMV with the row statistics in fixed K-slices (hc_mix_partials, block_ops.cuh): one
// value per block group for launches of few rows, all values of a slice for a tile of rows otherwise.
// Both kernels compute every value with the same operations in the same order.
#include "backends/cuda/kernels/block/block_ops.cuh"
#include "backends/cuda/runtime/pdl.cuh"

namespace dsv4::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxMix = kHcMaxMix;
constexpr int kHcGroup = 5;  // values per partials block (GEMV outputs j, then j == nm: the sum of squares)
constexpr int kHcHeld = 8;   // elements per thread whose loads are in flight together

// Block (slice, group, row): values j0 .. j0 + kHcGroup - 1 (j0 = group * kHcGroup) of one K-slice:
// for j < nm the partial GEMV h . fn[j], for j == nm the partial sum of h^2. Thread t accumulates
// elements t, t + 256, ... of the slice in turn (acc += h * fn, acc += h * h), then each value takes
// fwd_block_sum's tree (warp xor tree, then the warp partials by an xor tree over a zero-padded
// warp). A value's arithmetic depends on the slice and the thread only, never on the group or
// the row count of the launch.
__global__ void __launch_bounds__(kThreads) hc_partials_kernel(const float* __restrict__ h,
                                                               const float* __restrict__ fn, int nm, int64_t n,
                                                               float* __restrict__ partials) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t r = blockIdx.z, sl = blockIdx.x;
  const int j0 = static_cast<int>(blockIdx.y) * kHcGroup;
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  const int64_t len = n / kHcSplits, i0 = sl * len;
  const float* hr = h + r * n;
  float acc[kHcGroup];
#pragma unroll
  for (int q = 0; q < kHcGroup; ++q) acc[q] = 0.0f;
  for (int64_t base = 0; base < len; base += static_cast<int64_t>(kHcHeld) * kThreads) {
    float hv[kHcHeld], fv[kHcHeld][kHcGroup];
#pragma unroll
    for (int e = 0; e < kHcHeld; ++e) {  // every load unconditional (clamped into the slice and rows)
      const int64_t o = base + t + static_cast<int64_t>(e) * kThreads;
      const int64_t i = i0 + (o < len ? o : len - 1);
      hv[e] = hr[i];
#pragma unroll
      for (int q = 0; q < kHcGroup; ++q) fv[e][q] = fn[static_cast<int64_t>(min(j0 + q, nm - 1)) * n + i];
    }
#pragma unroll
    for (int e = 0; e < kHcHeld; ++e) {
      if (base + t + static_cast<int64_t>(e) * kThreads >= len) break;
#pragma unroll
      for (int q = 0; q < kHcGroup; ++q) {
        if (j0 + q < nm) acc[q] += hv[e] * fv[e][q];
        else if (j0 + q == nm) acc[q] += hv[e] * hv[e];
      }
    }
  }
  __shared__ float wsum[kHcGroup][kThreads / 32];
#pragma unroll
  for (int q = 0; q < kHcGroup; ++q) {
    float v = acc[q];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) wsum[q][warp] = v;
  }
  __syncthreads();
  if (warp >= kHcGroup || j0 + warp > nm) return;
  float v = lane < kThreads / 32 ? wsum[warp][lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) partials[(r * kHcSplits + sl) * (nm + 1) + j0 + warp] = v;
}


// The row-tiled form, for C = 4 (nm = 24, 25 values) and slices of at most kTileHeld * 256 elements.
constexpr int kTileValues = kMaxMix + 1;  // the GEMV outputs, then the sum of squares
constexpr int kTileHeld = 5;              // elements of the slice per thread (the slice's fn held in registers)
constexpr int kTileRows = 16;             // rows per block
constexpr int64_t kTiledFrom = 64;        // launches of this many rows or more take the row-tiled form

// One level of the transposed xor tree over 2 * kHalf values: a lane with bit kHalf set keeps the upper
// half, the other the lower, each adding the partner's copy (the butterfly's v + shfl_xor(v, kHalf)).
template <int kHalf>
__device__ __forceinline__ void tree_level(float (&v)[32], int lane) {
  const bool up = (lane & kHalf) != 0;
#pragma unroll
  for (int i = 0; i < kHalf; ++i) {
    const float send = up ? v[i] : v[i + kHalf], keep = up ? v[i + kHalf] : v[i];
    v[i] = __fadd_rn(keep, __shfl_xor_sync(0xffffffffu, send, kHalf));
  }
}

// Block (slice, row tile): every value of one K-slice for up to kTileRows rows. Thread t holds fn at
// its elements t, t + 256, ... of the slice for all 24 outputs once, then per row computes each value
// exactly as hc_partials_kernel does: the same FMAs in element order from +0, the warp's xor tree
// (here transposed: at the level of lane offset o a lane keeps half of its values and adds the
// partner's copy of them, which is the butterfly's own addition, so after five levels lane l holds
// value l's warp total), then warp 0's lanes take the totals' xor tree over the warp padded with
// zeros, written out as the additions it makes.
__global__ void __launch_bounds__(kThreads) hc_partials_tiled_kernel(const float* __restrict__ h,
                                                                     const float* __restrict__ fn, int64_t n,
                                                                     int64_t rows, float* __restrict__ partials) {
  constexpr int nm = kMaxMix;
  pdl_wait();
  pdl_launch_dependents();
  const int64_t sl = blockIdx.x, r0 = static_cast<int64_t>(blockIdx.y) * kTileRows;
  const int64_t r1 = r0 + kTileRows < rows ? r0 + kTileRows : rows;
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  const int64_t len = n / kHcSplits, i0 = sl * len;
  bool has[kTileHeld];
  float w[kTileHeld][nm];
#pragma unroll
  for (int e = 0; e < kTileHeld; ++e) {
    const int64_t o = t + static_cast<int64_t>(e) * kThreads;
    has[e] = o < len;
    const int64_t i = i0 + (has[e] ? o : 0);
#pragma unroll
    for (int j = 0; j < nm; ++j) w[e][j] = fn[static_cast<int64_t>(j) * n + i];
  }
  __shared__ float wsum[2][kTileValues][kThreads / 32];
  float hv[kTileHeld];
  auto load_row = [&](int64_t r, float (&v)[kTileHeld]) {
#pragma unroll
    for (int e = 0; e < kTileHeld; ++e) v[e] = h[r * n + i0 + (has[e] ? t + static_cast<int64_t>(e) * kThreads : 0)];
  };
  load_row(r0, hv);
  for (int64_t r = r0; r < r1; ++r) {
    float next[kTileHeld];
    load_row(r + 1 < r1 ? r + 1 : r, next);
    float v[32];
#pragma unroll
    for (int j = 0; j < 32; ++j) v[j] = 0.0f;
#pragma unroll
    for (int e = 0; e < kTileHeld; ++e) {
      if (has[e]) {
#pragma unroll
        for (int j = 0; j < nm; ++j) v[j] = __fmaf_rn(hv[e], w[e][j], v[j]);
        v[nm] = __fmaf_rn(hv[e], hv[e], v[nm]);
      }
    }
    tree_level<16>(v, lane);
    tree_level<8>(v, lane);
    tree_level<4>(v, lane);
    tree_level<2>(v, lane);
    tree_level<1>(v, lane);
    const int b = static_cast<int>(r - r0) & 1;
    if (lane < kTileValues) wsum[b][lane][warp] = v[0];
    __syncthreads();
    if (t < kTileValues) {
      // hc_partials_kernel's second tree for lane 0: lanes 8..31 hold +0, so after the levels of offset
      // 16 and 8 lane l < 8 holds (total_l + 0) + 0, then offsets 4, 2, 1 pair the lanes.
      float q[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) q[k] = __fadd_rn(__fadd_rn(wsum[b][t][k], 0.0f), __fadd_rn(0.0f, 0.0f));
      const float s = __fadd_rn(__fadd_rn(__fadd_rn(q[0], q[4]), __fadd_rn(q[2], q[6])),
                                __fadd_rn(__fadd_rn(q[1], q[5]), __fadd_rn(q[3], q[7])));
      partials[(r * kHcSplits + sl) * (nm + 1) + t] = s;
    }
#pragma unroll
    for (int e = 0; e < kTileHeld; ++e) hv[e] = next[e];
  }
}

}  // namespace

cudaError_t hc_mix_partials(const float* h, const float* fn, int64_t rows, int C, int64_t D, float* partials,
                            cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  const int64_t n = static_cast<int64_t>(C) * D;
  if (C * (C + 2) > kMaxMix || n % kHcSplits) return cudaErrorInvalidValue;
  const int nm = C * (C + 2);
  if (nm == kMaxMix && rows >= kTiledFrom && n / kHcSplits <= int64_t{kTileHeld} * kThreads) {
    const int64_t tiles = (rows + kTileRows - 1) / kTileRows;
    if (tiles > 65535) return cudaErrorInvalidValue;
    return launch_pdl(hc_partials_tiled_kernel, dim3(kHcSplits, static_cast<unsigned>(tiles)), dim3(kThreads), 0, s,
                      h, fn, n, rows, partials);
  }
  if (rows > 65535) return cudaErrorInvalidValue;
  const dim3 grid(kHcSplits, static_cast<unsigned>((nm + kHcGroup) / kHcGroup), static_cast<unsigned>(rows));
  return launch_pdl(hc_partials_kernel, grid, dim3(kThreads), 0, s, h, fn, nm, n, partials);
}

}  // namespace dsv4::cuda
