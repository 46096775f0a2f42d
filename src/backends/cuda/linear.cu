// FP8 / FP4 linears on tensor cores (lowp_mma.cuh): one CTA per 16 output columns, its warps over
// the shape's K slices, each staging its slice of up to 8 rows act_quant'ed into shared memory and
// streaming its weights through mma.m16n8k16; the slices combine in a fixed order.
#include <algorithm>
#include <initializer_list>

#include "backends/cuda/exl3_view.h"
#include "backends/cuda/linear.cuh"
#include "backends/cuda/lowp_rows.cuh"

namespace dsv4::cuda {
namespace {

using lowp::Fmt;
using lowp::LowpWeight;

// 64 registers a thread at most: two 16-warp CTAs (or four of 8) resident per SM.
constexpr int kRowMinBlocks = 2;

template <Fmt F>
__global__ void __launch_bounds__(lowp::kMaxSlices * 32, kRowMinBlocks)
    tc_linear_kernel(const float* __restrict__ x, int64_t rows, LowpWeight W, int act_block, lowp::TileLayout L,
                     float* __restrict__ y) {
  extern __shared__ float4 smem4[];
  lowp::rows_tile<F, 1>(
      &W, blockIdx.x, rows, [&](int64_t r) { return x + r * W.in; }, act_block, L, smem4,
      [&](int64_t r, int64_t col, const float (&v)[1]) { y[r * W.out + col] = round_bf16(v[0]); });
}

// Two weights of one shape over the same rows (the shared expert's w1 and w3): one launch, the
// staged rows shared; each output's arithmetic is tc_linear_kernel's.
template <Fmt F>
__global__ void __launch_bounds__(lowp::kMaxSlices * 32, kRowMinBlocks)
    tc_linear_pair_kernel(const float* __restrict__ x, int64_t rows, LowpWeight W1, LowpWeight W3, int act_block,
                          lowp::TileLayout L, float* __restrict__ y1, float* __restrict__ y3) {
  extern __shared__ float4 smem4[];
  const LowpWeight W[2] = {W1, W3};
  lowp::rows_tile<F, 2>(
      W, blockIdx.x, rows, [&](int64_t r) { return x + r * W1.in; }, act_block, L, smem4,
      [&](int64_t r, int64_t col, const float (&v)[2]) {
        y1[r * W1.out + col] = round_bf16(v[0]);
        y3[r * W1.out + col] = round_bf16(v[1]);
      });
}

// Prefill: a CTA owns 64 columns x 64 rows; K goes in pieces of 4 chunks (128 k, a multiple of
// every act block), double-buffered: the piece's weights by cp.async into shared memory, its rows
// act_quant'ed into shared memory from registers loaded one piece ahead. Warp (wc, wr) computes
// columns 32 wc .. +32 and rows 16 wr .. +16; each element's arithmetic is rows_tile's (same
// fragments, the same chunk order, the same slice fold), so a row gives the same bits here as in a
// launch of 1 row.
constexpr int kPCols = 64, kPRows = 64, kPChunks = 4, kPK = kPChunks * lowp::kChunk;
constexpr int kPXStride = kPK + 32;  // f16 per staged row: 320 bytes, rows 2 apart on other banks
template <Fmt F> constexpr int kPWStride = F == Fmt::fp8 ? 160 : 80;  // bytes per staged column
template <Fmt F>
constexpr size_t prefill_smem() {
  return 2 * (size_t(kPRows) * kPXStride * 2 + size_t(kPRows) * 4 * sizeof(float) + size_t(kPCols) * kPWStride<F>);
}

template <Fmt F>
__global__ void __launch_bounds__(256) tc_prefill_kernel(const float* __restrict__ x, int64_t rows, LowpWeight W,
                                                         int act_block, int kw, float* __restrict__ y) {
  using lowp::kChunk;
  constexpr int kCB = F == Fmt::fp8 ? 32 : 16;  // weight bytes per column per chunk
  extern __shared__ float4 smem4[];
  __half* sxq = reinterpret_cast<__half*>(smem4);                                    // [2][64][kPXStride]
  float* sxs = reinterpret_cast<float*>(sxq + 2 * kPRows * kPXStride);               // [2][64][4]
  uint8_t* sw = reinterpret_cast<uint8_t*>(sxs + 2 * kPRows * 4);                    // [2][64][kPWStride]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int wc = warp & 1, wr = warp >> 1;
  const int64_t cta_col = static_cast<int64_t>(blockIdx.x) * kPCols, row0 = static_cast<int64_t>(blockIdx.y) * kPRows;
  const int units = static_cast<int>(W.in / act_block), uc = act_block / kChunk, ucs = __ffs(uc) - 1;
  const int group = act_block / 4, gshift = __ffs(group) - 1;
  const int nchunks = static_cast<int>(W.in / kChunk), npieces = (nchunks + kPChunks - 1) / kPChunks;
  // scale pointers of this thread's columns (chunk c's bytes at s[c >> sh])
  lowp::WPtr<F> P[2] = {lowp::WPtr<F>(W, cta_col + 32 * wc + g, q), lowp::WPtr<F>(W, cta_col + 32 * wc + 16 + g, q)};

  // Piece p's weights -> buffer b (16-byte copies; columns past `out` left as they are: their
  // outputs are never written).
  auto copy_w = [&](int p, int b) {
    const int pc = min(kPChunks, nchunks - p * kPChunks), per_col = pc * kCB / 16;
    for (int i = threadIdx.x; i < kPCols * per_col; i += blockDim.x) {
      const int col = i / per_col, part = i % per_col;
      if (cta_col + col < W.out)
        lowp::cp_async16(sw + (b * kPCols + col) * kPWStride<F> + 16 * part,
                   W.w + (cta_col + col) * W.row_bytes + int64_t(p) * kPChunks * kCB + 16 * part);
    }
  };
  // Rows of piece p: warp w, item j holds row w + 8j, k quad `lane` of the piece.
  float4 v[8];
  auto load_x = [&](int p) {
    const int64_t k = int64_t(p) * kPK + 4 * lane;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int64_t r = row0 + warp + 8 * j;
      v[j] = (r < rows && k < W.in) ? *reinterpret_cast<const float4*>(x + r * W.in + k) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  };
  auto quant_x = [&](int b) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int r = warp + 8 * j;
      float amax = fmaxf(fmaxf(fabsf(v[j].x), fabsf(v[j].y)), fmaxf(fabsf(v[j].z), fabsf(v[j].w)));
      for (int off = group / 2; off; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
      lowp::quant_quad<F>(v[j], amax, lane, gshift, group, sxq + (b * kPRows + r) * kPXStride,
                          sxs + (b * kPRows + r) * 4);
    }
  };

  float acc[2][2][4], tot[2][2][4];
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[m][n][e] = 0.f, tot[m][n][e] = 0.f;
  int slice = 0, next_bound = lowp::slice_begin(1, units, kw) * uc;
  auto fold = [&]() {  // slice `slice` is complete: tot = acc_0, then tot + acc_s
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          tot[m][n][e] = slice == 0 ? acc[m][n][e] : __fadd_rn(tot[m][n][e], acc[m][n][e]);
          acc[m][n][e] = 0.f;
        }
  };

  copy_w(0, 0);
  load_x(0);
  quant_x(0);
  lowp::cp_async_commit();
  lowp::cp_async_wait<0>();
  __syncthreads();
  for (int p = 0; p < npieces; ++p) {
    const int b = p & 1;
    if (p + 1 < npieces) {
      copy_w(p + 1, b ^ 1);
      load_x(p + 1);
    }
    const int pc = min(kPChunks, nchunks - p * kPChunks);
    for (int cc = 0; cc < pc; ++cc) {
      const int c = p * kPChunks + cc;
      if (c == next_bound) {
        fold();
        ++slice;
        next_bound = lowp::slice_begin(slice + 1, units, kw) * uc;
      }
      lowp::WFrag<F> f[2];
      float ws0[2], ws1[2];
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const uint8_t* wp = sw + (b * kPCols + 32 * wc + 16 * m + g) * kPWStride<F> + cc * kCB + (kCB / 4) * q;
        if constexpr (F == Fmt::fp8) {
          f[m].c0 = *reinterpret_cast<const uint2*>(wp);
          f[m].c1 = *reinterpret_cast<const uint2*>(wp + 8 * kPWStride<F>);
        } else {
          f[m].c0 = *reinterpret_cast<const uint32_t*>(wp);
          f[m].c1 = *reinterpret_cast<const uint32_t*>(wp + 8 * kPWStride<F>);
        }
        P[m].scales(c, ws0[m], ws1[m]);
      }
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        const int r = 16 * wr + 8 * n;
        const uint4 bx = *reinterpret_cast<const uint4*>(sxq + (b * kPRows + r + g) * kPXStride + cc * kChunk + 8 * q);
        const float xs0 = sxs[(b * kPRows + r + 2 * q) * 4 + (cc >> ucs)];
        const float xs1 = sxs[(b * kPRows + r + 2 * q + 1) * 4 + (cc >> ucs)];
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          float d[4];
          lowp::chunk_mma<F>(f[m], bx, d);
          lowp::scale_add<F>(d, ws0[m], ws1[m], xs0, xs1, acc[m][n]);
        }
      }
    }
    if (p + 1 < npieces) {
      quant_x(b ^ 1);
      lowp::cp_async_commit();
      lowp::cp_async_wait<0>();
    }
    __syncthreads();
  }
  fold();
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      const int64_t col = cta_col + 32 * wc + 16 * m + g, r = row0 + 16 * wr + 8 * n + 2 * q;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t cc = col + (e >> 1) * 8, rr = r + (e & 1);
        if (cc < W.out && rr < rows) y[rr * W.out + cc] = round_bf16(tot[m][n][e]);
      }
    }
}

// Per-device shared-memory limit, read once (the engine runs on one device per process).
int smem_optin() {
  static const int l = [] {
    int dev = 0, v = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (v < 48 * 1024) v = 48 * 1024;
    for (const void* k : {reinterpret_cast<const void*>(tc_linear_kernel<Fmt::fp8>),
                          reinterpret_cast<const void*>(tc_linear_kernel<Fmt::fp4>),
                          reinterpret_cast<const void*>(tc_linear_pair_kernel<Fmt::fp8>),
                          reinterpret_cast<const void*>(tc_prefill_kernel<Fmt::fp8>),
                          reinterpret_cast<const void*>(tc_prefill_kernel<Fmt::fp4>)})
      cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, v);
    return v;
  }();
  return l;
}

// Rows above which the 64 x 64 prefill tiles run (weights read once per 64 rows, not per 8).
constexpr int64_t kPrefillRows = 32;

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

bool bad_shape(const float* x, int64_t rows, const LowpWeight& W, int act_block) {
  return rows < 0 || W.in % 32 || (act_block != 32 && act_block != 64 && act_block != 128) || W.in % act_block ||
         !aligned16(x) || !aligned16(W.w) || W.scale_cols <= 0 || W.scale_cols % 32 ||
         ((W.scale_cols / 32) & (W.scale_cols / 32 - 1));
}

template <Fmt F>
cudaError_t launch_prefill(const float* x, int64_t rows, const LowpWeight& W, int act_block, float* y, cudaStream_t s) {
  if (prefill_smem<F>() > static_cast<size_t>(smem_optin())) return cudaErrorInvalidValue;
  const int kw = lowp::k_slices(W.in, static_cast<int>(W.in / act_block));
  const dim3 grid(static_cast<unsigned>((W.out + kPCols - 1) / kPCols), static_cast<unsigned>((rows + kPRows - 1) / kPRows));
  tc_prefill_kernel<F><<<grid, 256, prefill_smem<F>(), s>>>(x, rows, W, act_block, kw, y);
  return cudaGetLastError();
}

template <Fmt F>
cudaError_t launch(const float* x, int64_t rows, const LowpWeight& W, int act_block, float* y, cudaStream_t s) {
  if (bad_shape(x, rows, W, act_block)) return cudaErrorInvalidValue;
  if (rows == 0 || W.out == 0) return cudaSuccess;
  // The K split is the shape's (part of every element's arithmetic); rows only size the staging.
  if (rows > kPrefillRows) return launch_prefill<F>(x, rows, W, act_block, y, s);  // speed only: same bits
  const int64_t tiles = (W.out + 15) / 16;
  const lowp::TileLayout L = lowp::tile_layout<F>(W.in, act_block, rows, 1, tiles, static_cast<size_t>(smem_optin()));
  if (L.bytes() > static_cast<size_t>(smem_optin())) return cudaErrorInvalidValue;
  tc_linear_kernel<F><<<static_cast<unsigned>(tiles), L.nwarps * 32, L.bytes(), s>>>(x, rows, W, act_block, L, y);
  return cudaGetLastError();
}

LowpWeight as_lowp(const Fp8View& W) {
  return LowpWeight{W.w, W.scale, W.out, W.in, W.in, (W.in + W.block - 1) / W.block, W.block, W.block};
}

}  // namespace

cudaError_t fp8_linear(const float* x, int64_t rows, const Fp8View& W, int act_block, float* y, cudaStream_t s) {
  if (W.exl3) return exl3_linear(x, rows, *W.exl3, y, Exl3Out::bf16, s);  // a pack's linear (no act_quant)
  if (W.block <= 0 || W.block % 32) return cudaErrorInvalidValue;
  return launch<Fmt::fp8>(x, rows, as_lowp(W), act_block, y, s);
}

cudaError_t fp8_linear_pair(const float* x, int64_t rows, const Fp8View& W1, const Fp8View& W3, int act_block,
                            float* y1, float* y3, cudaStream_t s) {
  if (W1.exl3 || W3.exl3 || rows > kPrefillRows) {  // two launches: the same bits
    const cudaError_t e = fp8_linear(x, rows, W1, act_block, y1, s);
    return e != cudaSuccess ? e : fp8_linear(x, rows, W3, act_block, y3, s);
  }
  if (W1.block <= 0 || W1.block % 32 || W3.block != W1.block || W3.out != W1.out || W3.in != W1.in)
    return cudaErrorInvalidValue;
  const LowpWeight L1 = as_lowp(W1), L3 = as_lowp(W3);
  if (bad_shape(x, rows, L1, act_block) || !aligned16(L3.w)) return cudaErrorInvalidValue;
  if (rows == 0 || W1.out == 0) return cudaSuccess;
  const int64_t tiles = (W1.out + 15) / 16;
  const lowp::TileLayout L =
      lowp::tile_layout<Fmt::fp8>(W1.in, act_block, rows, 2, tiles, static_cast<size_t>(smem_optin()));
  if (L.bytes() > static_cast<size_t>(smem_optin())) return cudaErrorInvalidValue;
  tc_linear_pair_kernel<Fmt::fp8><<<static_cast<unsigned>(tiles), L.nwarps * 32, L.bytes(), s>>>(x, rows, L1, L3,
                                                                                                 act_block, L, y1, y3);
  return cudaGetLastError();
}

cudaError_t fp4_linear(const float* x, int64_t rows, const Fp4View& W, int act_block, float* y, cudaStream_t s) {
  if (W.exl3) return exl3_linear(x, rows, *W.exl3, y, Exl3Out::bf16, s);  // a pack's linear (no act_quant)
  const LowpWeight L{W.w, W.scale, W.out, W.in, W.in / 2, W.in / 32, 1, 32};
  return launch<Fmt::fp4>(x, rows, L, act_block, y, s);
}

}  // namespace dsv4::cuda
