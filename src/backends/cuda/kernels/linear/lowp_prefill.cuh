// The prefill tile of the FP8 / FP4 linears (rows > 32, routed experts' segments at prefill): 64
// columns x 64 rows per CTA, weights by cp.async, each element's arithmetic that of rows_tile.
#pragma once

#include "backends/cuda/kernels/linear/lowp_rows.cuh"

namespace dsv4::cuda::lowp {

// A CTA owns 64 columns x 64 rows; K goes in pieces of 4 chunks (128 k, a multiple of
// every act block), double-buffered: the piece's weights by cp.async into shared memory, its rows
// act_quant'ed into shared memory from registers loaded one piece ahead. Warp (wc, wr) computes
// columns 32 wc .. +32 and rows 16 wr .. +16; each element's arithmetic is rows_tile's (same
// fragments, the same chunk order, the same slice fold), so a row gives the same bits here as in a
// launch of 1 row.
constexpr int kPCols = 64, kPRows = 64, kPChunks = 4, kPK = kPChunks * kChunk;
constexpr int kPXStride = kPK + 32;  // f16 per staged row: 320 bytes, rows 2 apart on other banks
template <Fmt F> constexpr int kPWStride = F == Fmt::fp8 ? 160 : 80;  // bytes per staged column
template <Fmt F>
constexpr size_t prefill_smem() {
  return 2 * (size_t(kPRows) * kPXStride * 2 + size_t(kPRows) * 4 * sizeof(float) + size_t(kPCols) * kPWStride<F>);
}

// Columns [cta_col, cta_col + 64) of W for rows 0 .. nrows-1 (nrows <= 64; row r at row_ptr(r)) by
// 256 threads with prefill_smem<F>() bytes at smem4; emit(r, col, v) once per valid (row, column)
// with v the fp32 sum. Contains __syncthreads: every thread of the CTA must call it.
template <Fmt F, typename RowPtr, typename Emit>
__device__ __forceinline__ void prefill_tile(RowPtr row_ptr, int nrows, const LowpWeight& W, int act_block, int kw,
                                             int64_t cta_col, float4* smem4, Emit emit) {
  constexpr int kCB = F == Fmt::fp8 ? 32 : 16;  // weight bytes per column per chunk
  __half* sxq = reinterpret_cast<__half*>(smem4);                                    // [2][64][kPXStride]
  float* sxs = reinterpret_cast<float*>(sxq + 2 * kPRows * kPXStride);               // [2][64][4]
  uint8_t* sw = reinterpret_cast<uint8_t*>(sxs + 2 * kPRows * 4);                    // [2][64][kPWStride]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int wc = warp & 1, wr = warp >> 1;
  const int units = static_cast<int>(W.in / act_block), uc = act_block / kChunk, ucs = __ffs(uc) - 1;
  const int group = act_block / 4, gshift = __ffs(group) - 1;
  const int nchunks = static_cast<int>(W.in / kChunk), npieces = (nchunks + kPChunks - 1) / kPChunks;
  // scale pointers of this thread's columns (chunk c's bytes at s[c >> sh])
  WPtr<F> P[2] = {WPtr<F>(W, cta_col + 32 * wc + g, q), WPtr<F>(W, cta_col + 32 * wc + 16 + g, q)};

  // Piece p's weights -> buffer b (16-byte copies; columns past `out` left as they are: their
  // outputs are never written).
  auto copy_w = [&](int p, int b) {
    const int pc = min(kPChunks, nchunks - p * kPChunks), per_col = pc * kCB / 16;
    for (int i = threadIdx.x; i < kPCols * per_col; i += blockDim.x) {
      const int col = i / per_col, part = i % per_col;
      if (cta_col + col < W.out)
        cp_async16(sw + (b * kPCols + col) * kPWStride<F> + 16 * part,
                   W.w + (cta_col + col) * W.row_bytes + int64_t(p) * kPChunks * kCB + 16 * part);
    }
  };
  // Rows of piece p: warp w, item j holds row w + 8j, k quad `lane` of the piece.
  float4 v[8];
  auto load_x = [&](int p) {
    const int64_t k = int64_t(p) * kPK + 4 * lane;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int r = warp + 8 * j;
      v[j] = (r < nrows && k < W.in) ? *reinterpret_cast<const float4*>(row_ptr(r) + k) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  };
  auto quant_x = [&](int b) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int r = warp + 8 * j;
      float amax = fmaxf(fmaxf(fabsf(v[j].x), fabsf(v[j].y)), fmaxf(fabsf(v[j].z), fabsf(v[j].w)));
      for (int off = group / 2; off; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
      quant_quad<F>(v[j], amax, lane, gshift, group, sxq + (b * kPRows + r) * kPXStride,
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
  int slice = 0, next_bound = slice_begin(1, units, kw) * uc;
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
  cp_async_commit();
  cp_async_wait<0>();
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
        next_bound = slice_begin(slice + 1, units, kw) * uc;
      }
      WFrag<F> f[2];
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
          chunk_mma<F>(f[m], bx, d);
          scale_add<F>(d, ws0[m], ws1[m], xs0, xs1, acc[m][n]);
        }
      }
    }
    if (p + 1 < npieces) {
      quant_x(b ^ 1);
      cp_async_commit();
      cp_async_wait<0>();
    }
    __syncthreads();
  }
  fold();
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      const int64_t col = cta_col + 32 * wc + 16 * m + g;
      const int r = 16 * wr + 8 * n + 2 * q;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t cc = col + (e >> 1) * 8;
        const int rr = r + (e & 1);
        if (cc < W.out && rr < nrows) emit(rr, cc, tot[m][n][e]);
      }
    }
}

}  // namespace dsv4::cuda::lowp
