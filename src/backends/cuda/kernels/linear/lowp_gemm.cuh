// The many-row GEMM of the FP8 / FP4 linears (prefill chunks, large batches, routed experts'
// segments): the rows are act_quant'ed once per launch into a global buffer (quant_rows_kernel), then
// CTAs of 128 weight columns x 32 NT rows run a multi-stage cp.async pipeline over K (weight bytes,
// activation codes and scales of each stage), 8 warps of 64 columns x 8 NT rows each. Every output
// element's arithmetic is lowp_mma.cuh's: the same fragments, the same chunk order, the same slice
// fold, so a row gets the bits of rows_tile (lowp_rows.cuh) and prefill_tile (lowp_prefill.cuh).
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/kernels/linear/lowp_rows.cuh"

namespace dsv4::cuda::lowp {

constexpr int kGCols = 128;                        // weight columns per CTA (two warp columns of 64)
constexpr int kGThreads = 256;                     // 8 warps: 2 along the columns x 4 along the rows
constexpr int kGStageChunks = 4;                   // chunks per pipeline stage
constexpr int kGStageK = kGStageChunks * kChunk;   // 128 k per stage, a multiple of every act block
constexpr int kGXRowBytes = kGStageK * 2;          // one row's codes (f16) of a stage
template <Fmt F> constexpr int kGStages = F == Fmt::fp8 ? 3 : 4;
template <Fmt F> constexpr int kGColBytes = kGStageChunks * WPtr<F>::kChunkBytes;  // a column's bytes of a stage
template <int NT> constexpr int kGRows = 32 * NT;  // rows per CTA

// Quantized rows in global memory: row r's e4m3 codes as f16 in pair order (lowp_mma.cuh) at
// xq + r kp, k in [in, kp) zero; its scales per 32-wide chunk at xs + r (kp / 32) (the scale of the
// chunk's act block, repeated for each chunk of the block, 0 past `in`). kp = in rounded up to a
// stage, so every stage of a row is whole 16-byte pieces.
struct QuantRows {
  __half* xq;
  float* xs;
  int64_t kp;
};
__host__ __device__ inline int64_t quant_kp(int64_t in) { return (in + kGStageK - 1) / kGStageK * kGStageK; }
inline size_t quant_row_bytes(int64_t in) {
  const int64_t kp = quant_kp(in);
  return size_t(kp) * sizeof(__half) + size_t(kp / kChunk) * sizeof(float);
}
// The buffer of `rows` rows at `base` (256-byte aligned; quant_row_bytes(in) * rows bytes).
inline QuantRows quant_rows_at(void* base, int64_t rows, int64_t in) {
  const int64_t kp = quant_kp(in);
  __half* xq = static_cast<__half*>(base);
  return QuantRows{xq, reinterpret_cast<float*>(xq + rows * kp), kp};
}

// act_quant (cpu::act_quant_row) of rows 0 .. nrows-1 (row r at row_ptr(r), `in` floats) into Q,
// rows nrows .. rows_alloc-1 zero. One warp per (row, stage-wide piece of K), lane l the quad
// 4l .. 4l+3 of the piece; the act_block / 4 lanes of a block take its amax with xor shuffles, and
// quant_quad gives the codes and scale rows_tile's stage_warp gives (the same quads, the same amax).
// Codes in pair order for gemm_tile; kSlots: in slot order for gemm_wg_tile (lowp_wgmma.cuh).
template <Fmt F, bool kSlots = false, typename RowPtr>
__device__ __forceinline__ void quant_rows(RowPtr row_ptr, int64_t nrows, int64_t rows_alloc, int64_t in,
                                           int act_block, const QuantRows& Q) {
  const int lane = threadIdx.x & 31, group = act_block / 4;
  const int64_t pieces = Q.kp / kGStageK, items = rows_alloc * pieces;
  const int64_t warp0 = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t nwarps = (int64_t(gridDim.x) * blockDim.x) >> 5;
  constexpr int kBatch = 4;  // loads in flight per lane before any is used
  for (int64_t base = warp0 * kBatch; base < items; base += nwarps * kBatch) {  // warp-uniform
    float4 v[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int64_t item = base + j, r = item / pieces, k = (item - r * pieces) * kGStageK + 4 * lane;
      v[j] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (item < items && r < nrows && k < in) v[j] = *reinterpret_cast<const float4*>(row_ptr(r) + k);
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int64_t item = base + j;
      if (item >= items) break;  // warp-uniform
      const int64_t r = item / pieces;
      const unsigned quad = static_cast<unsigned>((item - r * pieces) * (kGStageK / 4) + lane);  // k / 4 in the row
      float amax = fmaxf(fmaxf(fabsf(v[j].x), fabsf(v[j].y)), fmaxf(fabsf(v[j].z), fabsf(v[j].w)));
      for (int off = group / 2; off; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
      __half* xq = Q.xq + r * Q.kp;
      float* xs = Q.xs + r * (Q.kp / kChunk);
      if (r < nrows && 4 * int64_t(quad) < in) {
        // the scale goes to each chunk of the block: written by the first quad of every chunk
        quant_quad<F, kSlots>(v[j], amax, quad, 3, 8, xq, xs);
      } else {
        if ((quad & 1) == 0) *reinterpret_cast<uint4*>(xq + (quad / 2) * 8) = make_uint4(0, 0, 0, 0);
        if ((quad & 7) == 0) xs[quad >> 3] = 0.f;
      }
    }
  }
}

// Shared memory of one GEMM CTA: kGStages<F> stages, each the 128 columns' weight bytes
// [128][kGColBytes], the rows' codes [32 NT][kGXRowBytes], the rows' chunk scales float [32 NT][4] and
// the columns' scale factors float [4][128] (ws * kFactor of chunk cc of column j at cc * 128 + j, 0
// for an absent column).
template <Fmt F, int NT>
struct GemmLayout {
  static constexpr int kW = kGCols * kGColBytes<F>;
  static constexpr int kX = kGRows<NT> * kGXRowBytes;
  static constexpr int kXs = kGRows<NT> * kGStageChunks * 4;
  static constexpr int kWs = kGStageChunks * kGCols * 4;
  static constexpr int kStage = kW + kX + kXs + kWs;
  static constexpr size_t kBytes = size_t(kGStages<F>) * kStage;
};

// CTAs per SM the GEMM kernels are built for (their __launch_bounds__): two for row tiles of up to 64
// rows (128 registers a thread), one for 128-row tiles (speed only).
template <int NT> constexpr int kGMinBlocks = NT <= 2 ? 2 : 1;

// Whether gemm_tile takes W: FP8 scale blocks of at least 32 columns (a warp's 64 columns are two
// whole halves of blocks, so a chunk's column scale is formed once per half); FP4 always.
template <Fmt F>
inline bool gemm_takes(const LowpWeight& W) {
  return F == Fmt::fp4 || (W.scale_rows >= 32 && (W.scale_rows & (W.scale_rows - 1)) == 0);
}

// Swizzles (speed only: where a 16-byte piece lives in its stage, never what it holds).
// FP8 column j: chunk cc's 32 bytes at slot cc ^ (j & 3), so the 4 columns a half warp reads fall
// on distinct banks. FP4 column j (64 bytes, two columns per 128): chunk cc's 16 bytes at slot
// cc ^ ((j >> 1) & 3). Row r's 16-byte piece u at u ^ 4 (r & 1): rows g and g + 1 of a quarter warp
// read opposite halves of the banks.
template <Fmt F>
__device__ __forceinline__ int w_chunk_off(int j, int cc) {
  if constexpr (F == Fmt::fp8) return j * kGColBytes<F> + ((cc ^ (j & 3)) << 5);
  else return j * kGColBytes<F> + ((cc ^ ((j >> 1) & 3)) << 4);
}
__device__ __forceinline__ int x_piece_off(int r, int u) { return r * kGXRowBytes + ((u ^ ((r & 1) << 2)) << 4); }

// A stage's weight copies: the 128 columns' bytes of chunks [4t, 4t + pc) (columns from ncols on are
// skipped) into st in w_chunk_off's layout, by `threads` threads (this one tid); one cp.async per 16 bytes.
template <Fmt F, int kThreads>
__device__ __forceinline__ void gemm_copy_weights(uint8_t* st, const uint8_t* wbase, const LowpWeight& W, int ncols,
                                                  int t, int pc, int tid) {
  constexpr int CB = WPtr<F>::kChunkBytes, kParts = kGStageChunks * CB / 16;  // 16-byte pieces of a column's stage
#pragma unroll
  for (int k = 0; k < kGCols * kParts / kThreads; ++k) {
    const int i = tid + k * kThreads, j = i / kParts, part = i - j * kParts;
    const int cc = part / (CB / 16), half = part - cc * (CB / 16);
    if (j < ncols && cc < pc)
      cp_async16(st + w_chunk_off<F>(j, cc) + 16 * half,
                 wbase + j * W.row_bytes + int64_t(t) * kGStageChunks * CB + 16 * part);
  }
}

// The columns' scale factors of a stage (ws * kFactor of chunk cc of column j at tab[cc * 128 + j], 0 for
// an absent column), staged by 256 threads: each thread's column and two chunks' bytes are loaded with a
// stage's copies (load) and written to that stage's table one issue later (flush), by when they have landed.
template <Fmt F>
struct ColScales {
  static constexpr uint32_t kNone = 0x100;
  const uint8_t* srow;
  int sj, scc0, sh;
  uint32_t raw[2] = {kNone, kNone};
  float* pending = nullptr;
  __device__ __forceinline__ ColScales(const LowpWeight& W, int64_t cta_col, int tid)
      : srow(scale_row(W, W.scale, cta_col + (tid & (kGCols - 1)))), sj(tid & (kGCols - 1)), scc0(2 * (tid >> 7)),
        sh(scale_shift(W)) {}
  __device__ __forceinline__ void load(int t, int pc, float* tab) {
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int c = t * kGStageChunks + scc0 + k;
      raw[k] = srow && scc0 + k < pc ? uint32_t{__ldg(srow + (c >> sh))} : kNone;
    }
    pending = tab;
  }
  __device__ __forceinline__ void flush() {
    if (!pending) return;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const float ws = raw[k] == kNone ? 0.f : ue8m0_to_f32(static_cast<uint8_t>(raw[k]));
      pending[(scc0 + k) * kGCols + sj] = __fmul_rn(ws, Traits<F>::kFactor);
    }
    pending = nullptr;
  }
};

// The A registers of both MMAs of chunk cc for columns j0 and j0 + 8 of a stage in w_chunk_off's layout.
template <Fmt F>
__device__ __forceinline__ void gemm_a_regs(const uint8_t* sw, int j0, int cc, int q, uint32_t (&a0)[4],
                                            uint32_t (&a1)[4]) {
  constexpr int CB = WPtr<F>::kChunkBytes;
  const uint8_t* wp0 = sw + w_chunk_off<F>(j0, cc) + (CB / 4) * q;
  const uint8_t* wp1 = sw + w_chunk_off<F>(j0 + 8, cc) + (CB / 4) * q;
  WFrag<F> f;
  if constexpr (F == Fmt::fp8) {
    f.c0 = *reinterpret_cast<const uint2*>(wp0);
    f.c1 = *reinterpret_cast<const uint2*>(wp1);
  } else {
    f.c0 = *reinterpret_cast<const uint32_t*>(wp0);
    f.c1 = *reinterpret_cast<const uint32_t*>(wp1);
  }
  a_regs<F>(f, a0, a1);
}

// Columns [cta_col, cta_col + 128) of W for rows 0 .. nrows-1 of the tile (nrows <= 32 NT), whose
// quantized rows are Q's rows row0 .. row0 + 32 NT - 1 (all present in Q: rows past nrows are read,
// never emitted). kGThreads threads, GemmLayout<F, NT>::kBytes of shared memory at smem. emit(r, col,
// v) once per valid (row, column), v the fp32 sum. kw = k_slices(W.in, W.in / act_block); W as
// gemm_takes<F> requires. Contains __syncthreads: every thread of the CTA must call it.
template <Fmt F, int NT, typename Emit>
__device__ __forceinline__ void gemm_tile(const QuantRows& Q, int64_t row0, int nrows, const LowpWeight& W,
                                          int act_block, int kw, int64_t cta_col, uint8_t* smem, Emit emit) {
  using L = GemmLayout<F, NT>;
  constexpr int S = kGStages<F>, R = kGRows<NT>;
  constexpr bool kBlk = F == Fmt::fp8;  // one column scale per 32 columns (gemm_takes)
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, q = lane & 3;
  const int wc = warp & 1, wr = warp >> 1;
  const int units = static_cast<int>(W.in / act_block), uc = act_block / kChunk;
  const int nchunks = static_cast<int>(W.in / kChunk), nst = (nchunks + kGStageChunks - 1) / kGStageChunks;
  const int ncols = static_cast<int>(W.out - cta_col < kGCols ? W.out - cta_col : kGCols);
  const uint8_t* wbase = W.w + cta_col * W.row_bytes;
  const int64_t xs_stride = Q.kp / kChunk;

  ColScales<F> scales(W, cta_col, tid);

  // Stage t (chunks 4t .. 4t + pc - 1) into slot t % S; one commit group per call, empty past the end.
  // The rows' codes and scales are copied whole (Q's rows are zero from `in` to the stage's end).
  auto issue = [&](int t) {
    if (t < nst) {
      const int slot = t % S, pc = min(kGStageChunks, nchunks - t * kGStageChunks);
      uint8_t* st = smem + slot * L::kStage;
      gemm_copy_weights<F, kGThreads>(st, wbase, W, ncols, t, pc, tid);
      constexpr int kXPieces = kGStageChunks * (kChunk * 2 / 16);  // 16-byte pieces of a row's stage
#pragma unroll
      for (int k = 0; k < R * kXPieces / kGThreads; ++k) {
        const int i = tid + k * kGThreads, r = i / kXPieces, u = i - r * kXPieces;
        cp_async16(st + L::kW + x_piece_off(r, u), Q.xq + (row0 + r) * Q.kp + int64_t(t) * kGStageK + 8 * u);
      }
      if (tid < R) cp_async16(st + L::kW + L::kX + 16 * tid, Q.xs + (row0 + tid) * xs_stride + t * kGStageChunks);
      scales.flush();
      scales.load(t, pc, reinterpret_cast<float*>(st + L::kW + L::kX + L::kXs));
    }
    cp_async_commit();
  };

  float acc[4][NT][4], tot[4][NT][4];
#pragma unroll
  for (int m = 0; m < 4; ++m)
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[m][n][e] = 0.f, tot[m][n][e] = 0.f;
  int slice = 0, next_bound = slice_begin(1, units, kw) * uc;
  // Slice `slice` is complete: tot = acc_0, then tot + acc_s; acc starts the next slice from zero.
  auto fold = [&]() {
#pragma unroll
    for (int m = 0; m < 4; ++m)
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          tot[m][n][e] = slice == 0 ? acc[m][n][e] : __fadd_rn(tot[m][n][e], acc[m][n][e]);
          acc[m][n][e] = 0.f;
        }
    ++slice;
    next_bound = slice_begin(slice + 1, units, kw) * uc;
  };

  for (int t = 0; t < S - 1; ++t) {
    issue(t);
    scales.flush();  // the prologue's scales go in at once
  }
  for (int t = 0; t < nst; ++t) {
    cp_async_wait<S - 2>();  // stage t's copies by this thread have landed
    scales.flush();          // the scales of stage t + S - 2 (its slot last read two iterations ago)
    __syncthreads();         // ... every thread's copies and tables; slot (t - 1) % S is free
    issue(t + S - 1);
    const uint8_t* st = smem + (t % S) * L::kStage;
    const uint8_t* sw = st;
    const uint8_t* sx = st + L::kW;
    const float* sxs = reinterpret_cast<const float*>(st + L::kW + L::kX);
    const float* tab = reinterpret_cast<const float*>(st + L::kW + L::kX + L::kXs);
    const int pc = min(kGStageChunks, nchunks - t * kGStageChunks);
    // Chunk cc of the stage into acc.
    auto chunk = [&](int cc) {
      uint4 bx[NT];
      float xs0[NT], xs1[NT];
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        const int rb = 8 * NT * wr + 8 * n;
        bx[n] = *reinterpret_cast<const uint4*>(sx + x_piece_off(rb + g, 4 * cc + q));
        xs0[n] = sxs[(rb + 2 * q) * kGStageChunks + cc];
        xs1[n] = sxs[(rb + 2 * q + 1) * kGStageChunks + cc];
      }
      // kBlk: the scale products xs * ws of the warp's two 32-column halves, once per chunk (the
      // products scale_add_w forms per column: the columns of a half share ws).
      float p0[2][NT], p1[2][NT];
      if constexpr (kBlk) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float wb = tab[cc * kGCols + 64 * wc + 32 * h];
#pragma unroll
          for (int n = 0; n < NT; ++n) p0[h][n] = __fmul_rn(xs0[n], wb), p1[h][n] = __fmul_rn(xs1[n], wb);
        }
      }
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const int j0 = 64 * wc + 16 * m + g;
        uint32_t a0[4], a1[4];
        gemm_a_regs<F>(sw, j0, cc, q, a0, a1);  // converted once, used for the warp's NT row tiles
        float w0 = 0.f, w1 = 0.f;
        if constexpr (!kBlk) w0 = tab[cc * kGCols + j0], w1 = tab[cc * kGCols + j0 + 8];
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          const float z[4] = {0.f, 0.f, 0.f, 0.f};
          float tmp[4], d[4];
          mma16816(tmp, a0, bx[n].x, bx[n].y, z);  // chunk_mma's two MMAs, in its order
          mma16816(d, a1, bx[n].z, bx[n].w, tmp);
          if constexpr (kBlk) {
            const int h = m >> 1;
            acc[m][n][0] = __fmaf_rn(d[0], p0[h][n], acc[m][n][0]);
            acc[m][n][1] = __fmaf_rn(d[1], p1[h][n], acc[m][n][1]);
            acc[m][n][2] = __fmaf_rn(d[2], p0[h][n], acc[m][n][2]);
            acc[m][n][3] = __fmaf_rn(d[3], p1[h][n], acc[m][n][3]);
          } else {
            scale_add_w(d, w0, w1, xs0[n], xs1[n], acc[m][n]);
          }
        }
      }
    };
    // A slice ends before chunk bpos of this stage when bpos < pc; at most once per stage (k_slices gives
    // every slice at least 8 chunks). Stages without a slice end run no fold code at all (speed only: a
    // fold tested inside the unrolled chunks was compiled into every chunk's instruction stream).
    const int bpos = next_bound - t * kGStageChunks;
    if (bpos >= pc) {
#pragma unroll
      for (int cc = 0; cc < kGStageChunks; ++cc)
        if (cc < pc) chunk(cc);
    } else {
#pragma unroll 1
      for (int cc = 0; cc < bpos; ++cc) chunk(cc);
      fold();
#pragma unroll 1
      for (int cc = bpos; cc < pc; ++cc) chunk(cc);
    }
  }
  cp_async_wait<0>();  // no copy outstanding when the CTA moves on (its shared memory is reused)
  __syncthreads();
  fold();  // the last slice
#pragma unroll
  for (int m = 0; m < 4; ++m)
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      const int64_t col = cta_col + 64 * wc + 16 * m + g;
      const int r = 8 * NT * wr + 8 * n + 2 * q;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t cc = col + (e >> 1) * 8;
        const int rr = r + (e & 1);
        if (cc < W.out && rr < nrows) emit(rr, cc, tot[m][n][e]);
      }
    }
}

// Host side (lowp_gemm.cu).
// Whether the many-row paths run gemm_tile (default) or prefill_tile: DSV4_LOWP_GEMM=0 in the
// environment at the first call selects prefill_tile; set_lowp_gemm (linear.cuh) switches at run time.
bool gemm_enabled();
// The row tile (NT: 32 NT rows per CTA) for a launch of `col_tiles` column tiles and `rows`
// rows on `sms` SMs: the largest of 128, 64, 32 rows whose grid still fills the SMs (speed only).
// Both choices yield to set_lowp_gemm_tile_rows (linear.cuh).
int gemm_nt(int64_t rows, int64_t col_tiles, int sms);
// The row tile of the routed experts' GEMM for n_pairs pairs: 128 rows when the pairs per expert
// average 128 or more (V4.1's 384 experts), 64 from 32 on, else 32 (short segments waste less of a
// narrower tile; speed only).
int experts_nt(int64_t n_pairs);
// Stream-ordered device memory for one launch's quantized rows: cudaMallocAsync on s (an allocation
// node of the graph when s is capturing); gemm_free releases it on s after the launch's last reader.
cudaError_t gemm_alloc(size_t bytes, cudaStream_t s, void** p);
cudaError_t gemm_free(void* p, cudaStream_t s);
// Rows per launch so a launch's quantized rows take at most kGemmQuantBudget bytes (a multiple of
// 128, at least 128): longer calls go in pieces of this many rows (each row's bits are the same).
constexpr size_t kGemmQuantBudget = size_t(192) << 20;
int64_t gemm_chunk_rows(int64_t in);

}  // namespace dsv4::cuda::lowp
