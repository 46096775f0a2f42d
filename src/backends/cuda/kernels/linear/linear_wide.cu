// fp32 linears (fp32 or bf16-stored weights, no rounding): a warp per output column and up to 4 rows
// per pass over its weights (launches of few rows) or per 4 x 4 tile of rows and columns (many rows),
// lanes over 8-element K chunks in a fixed order. (bf16 linears:
// linear_bf16.cu, on tensor cores.)
#include "backends/cuda/kernels/linear/linear.cuh"
#include "backends/cuda/exl3/exl3_view.h"

#include <algorithm>

namespace dsv4::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kUnroll = 8;    // chunks in flight per lane
constexpr int kTileRows = 4;  // rows sharing one pass over a column's weights
constexpr int kBlockRows = 32;  // rows per CTA (grid.y splits longer launches; a multiple of kTileRows)

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off; off >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// One 8-element weight chunk as loaded (raw) and widened to floats.
template <typename WT> struct Chunk;
template <> struct Chunk<uint16_t> {
  uint4 q;
  __device__ __forceinline__ void load(const uint16_t* w) { q = __ldg(reinterpret_cast<const uint4*>(w)); }
  __device__ __forceinline__ void widen(float (&v)[8]) const {
    const uint32_t u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[2 * j] = __uint_as_float(u[j] << 16);
      v[2 * j + 1] = __uint_as_float(u[j] & 0xFFFF0000u);
    }
  }
};
template <> struct Chunk<float> {
  float4 a, b;
  __device__ __forceinline__ void load(const float* w) {
    a = __ldg(reinterpret_cast<const float4*>(w));
    b = __ldg(reinterpret_cast<const float4*>(w) + 1);
  }
  __device__ __forceinline__ void widen(float (&v)[8]) const {
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
  }
};

// Rows [r0, r0 + R) of output columns [n, n + N) (those below out): lane l takes chunks l, l + 32, ...
// (8 elements each, U chunks in flight) into 8 partial sums per row and column; fp32 rows with in % 8 == 4
// give their last 4 elements to lane (in/8) % 32. The partials combine pairwise, then the lane tree. The
// value of (row, column) takes the same operations for every R, N and U.
template <typename WT, int R, int N = 1, int U = kUnroll>
__device__ __forceinline__ void wide_tile(const float* __restrict__ x, int64_t r0, const WT* __restrict__ w,
                                          int64_t n, int64_t out, int64_t in, float* __restrict__ y) {
  const int lane = threadIdx.x & 31;
  const int64_t chunks = in / 8;
  const WT* wr[N];
#pragma unroll
  for (int c = 0; c < N; ++c) wr[c] = w + (n + c < out ? n + c : out - 1) * in;
  float p[R][N][8];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < N; ++c)
#pragma unroll
      for (int j = 0; j < 8; ++j) p[r][c][j] = 0.f;
  for (int64_t c0 = lane; c0 < chunks; c0 += 32 * U) {
    Chunk<WT> ch[U][N];
#pragma unroll
    for (int t = 0; t < U; ++t)
#pragma unroll
      for (int c = 0; c < N; ++c)
        if (c0 + 32 * t < chunks) ch[t][c].load(wr[c] + (c0 + 32 * t) * 8);
#pragma unroll
    for (int t = 0; t < U; ++t) {
      const int64_t k = c0 + 32 * t;
      if (k < chunks) {
        float wv[N][8];
#pragma unroll
        for (int c = 0; c < N; ++c) ch[t][c].widen(wv[c]);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const float* xr = x + (r0 + r) * in + k * 8;
          const float4 xa = *reinterpret_cast<const float4*>(xr), xb = *reinterpret_cast<const float4*>(xr + 4);
          const float xv[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
          for (int c = 0; c < N; ++c)
#pragma unroll
            for (int j = 0; j < 8; ++j) p[r][c][j] = __fmaf_rn(xv[j], wv[c][j], p[r][c][j]);
        }
      }
    }
  }
  if ((in & 7) && lane == (chunks & 31)) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int c = 0; c < N; ++c)
        for (int j = 0; j < 4; ++j) {
          float wj;
          if constexpr (sizeof(WT) == 2) wj = __uint_as_float(static_cast<uint32_t>(wr[c][chunks * 8 + j]) << 16);
          else wj = wr[c][chunks * 8 + j];
          p[r][c][j] = __fmaf_rn(x[(r0 + r) * in + chunks * 8 + j], wj, p[r][c][j]);
        }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < N; ++c) {
      float acc = __fadd_rn(__fadd_rn(__fadd_rn(p[r][c][0], p[r][c][1]), __fadd_rn(p[r][c][2], p[r][c][3])),
                            __fadd_rn(__fadd_rn(p[r][c][4], p[r][c][5]), __fadd_rn(p[r][c][6], p[r][c][7])));
      acc = warp_sum(acc);
      if (lane == (r * N + c) % 32 && n + c < out) y[(r0 + r) * out + n + c] = acc;
    }
}

// Tiled launches: CTAs of WR x (kWarps / WR) warps, each warp kTileR rows x kTileN columns (the weights of a
// column read once per CTA, a row's inputs once per kTileN columns); WR follows the row count.
constexpr int kTileR = 4, kTileN = 4;
constexpr int64_t kTiledFrom = 64;  // launches of this many rows always take the tiles; fewer (from 2) where
                                    // the tiles alone fill the device twice over (wide outputs: the head)

template <typename WT, int WR>
__global__ void __launch_bounds__(kWarps * 32) wide_tiled_kernel(const float* __restrict__ x, int64_t rows,
                                                                 const WT* __restrict__ w, int64_t out, int64_t in,
                                                                 float* __restrict__ y) {
  constexpr int WC = kWarps / WR;
  const int warp = threadIdx.x >> 5;
  const int64_t n = (static_cast<int64_t>(blockIdx.x) * WC + warp % WC) * kTileN;
  const int64_t r0 = (static_cast<int64_t>(blockIdx.y) * WR + warp / WC) * kTileR;
  if (n >= out || r0 >= rows) return;
  constexpr int kTileU = sizeof(WT) == 2 ? 2 : 1;  // chunks in flight within the registers left
  switch (std::min<int64_t>(kTileR, rows - r0)) {
    case 1: wide_tile<WT, 1, kTileN, kTileU>(x, r0, w, n, out, in, y); break;
    case 2: wide_tile<WT, 2, kTileN, kTileU>(x, r0, w, n, out, in, y); break;
    case 3: wide_tile<WT, 3, kTileN, kTileU>(x, r0, w, n, out, in, y); break;
    default: wide_tile<WT, kTileR, kTileN, kTileU>(x, r0, w, n, out, in, y); break;
  }
}

// kRowsMax 1: single-row launches (fewer registers); 4: rows in tiles of up to 4, blocks of 32 rows
// per CTA along grid.y (the tiling never changes a row's arithmetic: wide_tile is the same for
// every R).
template <typename WT, int kRowsMax>
__global__ void __launch_bounds__(kWarps * 32) wide_linear_kernel(const float* __restrict__ x, int64_t rows,
                                                                  const WT* __restrict__ w, int64_t out, int64_t in,
                                                                  float* __restrict__ y) {
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); n < out;
       n += static_cast<int64_t>(gridDim.x) * kWarps) {
    if constexpr (kRowsMax == 1) {
      wide_tile<WT, 1>(x, 0, w, n, out, in, y);
    } else {  // this CTA's block of rows (grid.y), in tiles of up to 4
      const int64_t rb = static_cast<int64_t>(blockIdx.y) * kBlockRows, re = std::min<int64_t>(rows, rb + kBlockRows);
      for (int64_t r0 = rb; r0 < re; r0 += kTileRows) {
        switch (std::min<int64_t>(kTileRows, re - r0)) {
          case 1: wide_tile<WT, 1>(x, r0, w, n, out, in, y); break;
          case 2: wide_tile<WT, 2>(x, r0, w, n, out, in, y); break;
          case 3: wide_tile<WT, 3>(x, r0, w, n, out, in, y); break;
          default: wide_tile<WT, 4>(x, r0, w, n, out, in, y); break;
        }
      }
    }
  }
}

template <typename WT, int WR>
cudaError_t launch_tiled(const float* x, int64_t rows, const WT* w, int64_t out, int64_t in, float* y,
                         cudaStream_t s) {
  const int64_t cols = (kWarps / WR) * kTileN, tile_rows = WR * kTileR;
  const int64_t gx = (out + cols - 1) / cols, gy = (rows + tile_rows - 1) / tile_rows;
  if (gx > 2147483647 || gy > 65535) return cudaErrorInvalidValue;
  wide_tiled_kernel<WT, WR><<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), kWarps * 32, 0, s>>>(
      x, rows, w, out, in, y);
  return cudaGetLastError();
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

template <typename WT>
cudaError_t launch(const float* x, int64_t rows, const WT* w, int64_t out, int64_t in, float* y, cudaStream_t s) {
  if (rows < 0 || in % (sizeof(WT) == 2 ? 8 : 4) || !aligned16(x) || !aligned16(w)) return cudaErrorInvalidValue;
  if (rows == 0 || out == 0) return cudaSuccess;
  const int64_t ctas = std::min<int64_t>((out + kWarps - 1) / kWarps, int64_t(sm_count()) * 8);
  const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
  const int wr = rows <= kTileR ? 1 : rows <= 2 * kTileR ? 2 : 4;
  const int64_t tiled_ctas = (out + (kWarps / wr) * kTileN - 1) / ((kWarps / wr) * kTileN) *
                             ((rows + wr * kTileR - 1) / (wr * kTileR));
  if (rows >= kTiledFrom || (rows >= 2 && tiled_ctas >= 2 * int64_t(sm_count()))) {
    return wr == 1   ? launch_tiled<WT, 1>(x, rows, w, out, in, y, s)
           : wr == 2 ? launch_tiled<WT, 2>(x, rows, w, out, in, y, s)
                     : launch_tiled<WT, 4>(x, rows, w, out, in, y, s);
  } else if (rows == 1) {
    wide_linear_kernel<WT, 1><<<static_cast<unsigned>(ctas), kWarps * 32, 0, s>>>(x, rows, w, out, in, y);
  } else {
    wide_linear_kernel<WT, 4><<<dim3(static_cast<unsigned>(ctas), static_cast<unsigned>(blocks)), kWarps * 32, 0, s>>>(
        x, rows, w, out, in, y);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t f32_linear(const float* x, int64_t rows, const F32View& W, float* y, cudaStream_t s) {
  if (W.exl3) return exl3_linear(x, rows, *W.exl3, y, Exl3Out::f32, s);  // a pack's linear
  return launch<float>(x, rows, W.w, W.out, W.in, y, s);
}

cudaError_t f32_linear(const float* x, int64_t rows, const Bf16View& W, float* y, cudaStream_t s) {
  if (W.exl3) return exl3_linear(x, rows, *W.exl3, y, Exl3Out::f32, s);  // a pack's linear
  return launch<uint16_t>(x, rows, W.w, W.out, W.in, y, s);
}

}  // namespace dsv4::cuda
