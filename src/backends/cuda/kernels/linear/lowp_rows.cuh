// The row tile of the FP8 / FP4 linears at up to 32 rows (decode, routed experts): one CTA per 16
// output columns of NW same-shape weights, its warps taking the shape's K slices, each streaming
// its slice's weight bytes through a shared-memory ring by cp.async (whole 128-byte lines per
// column, no weight registers in flight) with its rows act_quant'ed beside them.
#pragma once

#include <initializer_list>

#include "backends/cuda/kernels/linear/lowp_mma.cuh"
#include "backends/cuda/runtime/pdl.cuh"

namespace dsv4::cuda::lowp {

constexpr int kPassRows = 8;     // the MMA's N side: rows per pass over the weights
constexpr int kStageChunks = 4;  // chunks per ring stage: 128 (FP8) / 64 (FP4) bytes of each column
constexpr int kMaxDepth = 4;     // ring stages per warp and weight at most (TileLayout::depth)
constexpr int kRowRegs = 64;     // registers per thread of the row kernels (their launch bounds)
// Bytes per staged column: 32 bytes past a multiple of 128 (FP8) / 16 past 64 (FP4), so the 8
// columns g of one fragment read fall on distinct banks.
template <Fmt F> constexpr int kColStride = F == Fmt::fp8 ? 160 : 80;
// One ring stage of one weight: the 16 columns' weight bytes, then their scale factors as floats
// [kStageChunks][16] (ws * kFactor of chunk cc of column j at cc * 16 + j; 0 for an absent column or chunk).
template <Fmt F> constexpr int kStageWeightBytes = 16 * kColStride<F>;
template <Fmt F> constexpr int kStageBytes = kStageWeightBytes<F> + 16 * kStageChunks * int(sizeof(float));

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
#else
  *reinterpret_cast<uint4*>(smem) = *reinterpret_cast<const uint4*>(gmem);
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
// Waits until at most N of this thread's committed groups are pending.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}
__device__ __forceinline__ void cp_async_wait_n(int n) {  // n in 0 .. kMaxDepth - 1
  switch (n) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    default: cp_async_wait<3>(); break;
  }
}

// Shared memory of one row-tile CTA: partials float4 [nw][kw][32]; per warp its scales float
// [rt][ustride], its codes f16 [rt][stride] and its weight ring [nw][depth][kStageBytes] (ring
// bytes). nwarps <= kw warps take slices s = warp, warp + nwarps, ...; nwarps and depth are speed
// only (a slice's arithmetic is the same whichever warp runs it, however deep its ring).
struct TileLayout {
  int kw = 1, nwarps = 1, depth = 1, rt = 1, stride = 0, ustride = 0, nw = 1, ring = 0;
  __host__ __device__ size_t bytes() const {
    return sizeof(float4) * size_t(nw) * kw * 32 +
           size_t(nwarps) * (sizeof(float) * size_t(rt) * ustride + 2 * size_t(rt) * stride + size_t(ring));
  }
};

// What the launch planning needs of the device.
struct SmCaps {
  int sms = 132;
  size_t smem_sm = 228 * 1024, smem_block = 227 * 1024;
};

// The current device's limits (the engine runs on one device per process: callers read them once,
// into a static). Each kernel in `optin` is allowed the block opt-in of dynamic shared memory.
inline SmCaps device_caps(std::initializer_list<const void*> optin_kernels) {
  int dev = 0, optin = 0, per_sm = 0, sms = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (optin < 48 * 1024) optin = 48 * 1024;
  for (const void* k : optin_kernels) cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
  SmCaps r;
  r.sms = sms > 0 ? sms : 1;
  r.smem_block = static_cast<size_t>(optin);
  r.smem_sm = per_sm > optin ? static_cast<size_t>(per_sm) : static_cast<size_t>(optin);
  return r;
}

// Benchmarks only (set_lowp_layout_override in linear.cuh): fixes the slices per warp and the ring
// depth (capped by the slice's stages) where they fit; 0 = the planner's choice. Speed only, never
// the bits.
struct LayoutOverride {
  int per = 0, depth = 0;
};
inline LayoutOverride g_layout_override;

// The layout for nw weights [out, in] in a launch of `ctas` CTAs and passes of up to min(rows, 8)
// rows. A ring of 2 stages (1 for slices of one stage); one slice per warp, two when the launch has
// more CTAs than SMs and more than 8 slices; more per warp only where shared memory requires. Measured on
// an H200 (docs/perf.md, CUDA linears, the layout sweep of linear_bench): deeper rings and 4
// slices per warp were slower or no faster at batch 1 on every V4.1 shape.
template <Fmt F>
inline TileLayout tile_layout(int64_t in, int act_block, int64_t rows, int nw, int64_t ctas, const SmCaps& caps) {
  TileLayout L;
  const int units = static_cast<int>(in / act_block);
  L.kw = k_slices(in, units);
  const int umax = (units + L.kw - 1) / L.kw;
  L.ustride = (umax + 3) & ~3;
  L.stride = umax * act_block + ((umax * act_block) % 64 == 0 ? 32 : 0);  // rows 2 apart: other banks
  L.rt = static_cast<int>(rows < kPassRows ? rows : kPassRows);
  L.nw = nw;
  const int nst = (umax * (act_block / kChunk) + kStageChunks - 1) / kStageChunks;  // stages of the longest slice
  const LayoutOverride o = g_layout_override;
  int depth = o.depth > 0 ? o.depth : 2;
  depth = depth < nst ? depth : nst;
  L.depth = depth < 1 ? 1 : depth;
  L.ring = nw * L.depth * kStageBytes<F>;
  int per = o.per > 0 ? o.per : (L.kw > 8 && ctas > int64_t(caps.sms) ? 2 : 1);
  for (;; per *= 2) {
    L.nwarps = (L.kw + per - 1) / per;
    if (L.bytes() <= caps.smem_block || L.nwarps == 1) break;
  }
  if (L.bytes() > caps.smem_block) L.depth = 1, L.ring = nw * kStageBytes<F>;
  return L;
}

// Stage `slot` of a per-warp ring (NW weights, `depth` slots each): chunks [ca, ca + pc) of the
// columns j < ncols of a 16-column tile whose weight w starts at base[w] (column j at base[w] + j
// row_bytes[w]); 16-byte pieces, 8 lanes per 128 contiguous bytes of a column. A group is
// committed even when empty (pc <= 0) so the count of pending groups stays uniform. Absent columns
// are not copied (their outputs are never emitted, and an MMA row of A reaches only its own output).
template <Fmt F, int NW>
__device__ __forceinline__ void issue_stage(uint8_t* ring, int depth, int slot, const uint8_t* const (&base)[NW],
                                            const int64_t (&row_bytes)[NW], int ncols, int ca, int pc) {
  constexpr int CB = WPtr<F>::kChunkBytes;     // weight bytes of one column per chunk
  constexpr int kPieces = kStageChunks * CB / 16;  // per column of a full stage: 8 (FP8), 4 (FP4)
  const int lane = threadIdx.x & 31;
  if (pc > 0) {
    const int per_col = pc * CB / 16;
#pragma unroll
    for (int i = lane; i < 16 * kPieces; i += 32) {
      const int j = i / kPieces, piece = i % kPieces;
      if (j < ncols && piece < per_col) {
#pragma unroll
        for (int w = 0; w < NW; ++w)
          cp_async16(ring + (w * depth + slot) * kStageBytes<F> + j * kColStride<F> + 16 * piece,
                     base[w] + j * row_bytes[w] + int64_t(ca) * CB + 16 * piece);
      }
    }
  }
  cp_async_commit();
}

// The scales of a ring stage, issued with its weight bytes and written into the stage's table one
// issue later (by then landed), so the MMA loop reads them from shared memory: lane l takes column
// l % 16, chunks 2 (l / 16) and 2 (l / 16) + 1 of the stage. srow[w]: the lane's column's scale row
// in weight w (nullptr for an absent column); sh = log2 of the chunks per scale block. With a ring
// of one stage the table is written at once (the stage is multiplied right after its issue).
// Speed only: the MMA loop used to load each chunk's scale bytes from global memory and wait on them
// (H200, linear_bench: routed experts at 1 row 125.9 -> 94.8 us, wq_b 23.3 -> 19.7; docs/perf.md).
template <Fmt F, int NW>
struct StageScales {
  static constexpr uint32_t kNone = 0x100;  // no scale byte: the table gets 0
  uint32_t raw[NW][2];
  int pslot = -1;  // the slot whose table the held bytes belong to; -1: none held
  __device__ __forceinline__ void flush(uint8_t* ring, int depth) {
    if (pslot < 0) return;
    const int lane = threadIdx.x & 31, j = lane & 15, cc0 = 2 * (lane >> 4);
#pragma unroll
    for (int w = 0; w < NW; ++w) {
      float* tab = reinterpret_cast<float*>(ring + (w * depth + pslot) * kStageBytes<F> + kStageWeightBytes<F>);
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const float ws = raw[w][k] == kNone ? 0.f : ue8m0_to_f32(static_cast<uint8_t>(raw[w][k]));
        tab[(cc0 + k) * 16 + j] = __fmul_rn(ws, Traits<F>::kFactor);
      }
    }
    pslot = -1;
  }
  __device__ __forceinline__ void issue(uint8_t* ring, int depth, int slot, const uint8_t* const (&srow)[NW], int sh,
                                        int ca, int pc) {
    flush(ring, depth);
    const int cc0 = 2 * ((threadIdx.x & 31) >> 4);
#pragma unroll
    for (int w = 0; w < NW; ++w)
#pragma unroll
      for (int k = 0; k < 2; ++k)
        raw[w][k] = srow[w] && cc0 + k < pc ? uint32_t{__ldg(srow[w] + ((ca + cc0 + k) >> sh))} : kNone;
    pslot = slot;
    if (depth == 1) flush(ring, depth);
  }
};

// The chunks [cs, min(cs + kStageChunks, c1)) of one landed ring stage (slot `slot`) into acc, for
// the warp's rows 0 .. R-1 staged from chunk c0 on (xq, xs as stage_warp writes them; ucs = log2 of
// the chunks per act block): each chunk's arithmetic is lowp_mma.cuh's, chunks in increasing order.
template <Fmt F, int NW>
__device__ __forceinline__ void stage_mma(const uint8_t* ring, int depth, int slot, int c0, int cs, int c1, int R,
                                          const __half* xq, int stride, const float* xs, int ustride, int ucs,
                                          float (&acc)[NW][4]) {
  constexpr int CB = WPtr<F>::kChunkBytes;
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const uint8_t* buf = ring + slot * kStageBytes<F> + g * kColStride<F> + (CB / 4) * q;
#pragma unroll
  for (int cc = 0; cc < kStageChunks; ++cc) {
    const int c = cs + cc;
    if (c < c1) {
      const uint4 b = g < R ? *reinterpret_cast<const uint4*>(xq + g * stride + (c - c0) * kChunk + 8 * q)
                            : make_uint4(0, 0, 0, 0);
      const int ub = (c - c0) >> ucs;
      const float xs0 = 2 * q < R ? xs[2 * q * ustride + ub] : 0.f;
      const float xs1 = 2 * q + 1 < R ? xs[(2 * q + 1) * ustride + ub] : 0.f;
#pragma unroll
      for (int i = 0; i < NW; ++i) {
        const uint8_t* wp = buf + i * depth * kStageBytes<F> + cc * CB;
        const float* tab = reinterpret_cast<const float*>(ring + (i * depth + slot) * kStageBytes<F> + kStageWeightBytes<F>);
        WFrag<F> f;
        if constexpr (F == Fmt::fp8) {
          f.c0 = *reinterpret_cast<const uint2*>(wp);
          f.c1 = *reinterpret_cast<const uint2*>(wp + 8 * kColStride<F>);
        } else {
          f.c0 = *reinterpret_cast<const uint32_t*>(wp);
          f.c1 = *reinterpret_cast<const uint32_t*>(wp + 8 * kColStride<F>);
        }
        float d[4];
        chunk_mma<F>(f, b, d);
        scale_add_w(d, tab[cc * 16 + g], tab[cc * 16 + g + 8], xs0, xs1, acc[i]);
      }
    }
  }
}

// By one warp: the tile's outputs from the slices' partials part[(i kw + s) 32 + lane] (weight i,
// slice s), folded in slice order (tot = acc_0, then + acc_s), emit(r, col, v) for rows r < R of the
// pass and the present columns col0 (ok0) and col0 + 8 (ok1) of this lane.
template <int NW, typename Emit>
__device__ __forceinline__ void fold_emit(const float4* part, int kw, int R, int64_t col0, bool ok0, bool ok1,
                                          Emit emit) {
  const int lane = threadIdx.x & 31, q = lane & 3;
  float4 t[NW];
#pragma unroll
  for (int i = 0; i < NW; ++i) {
    t[i] = part[i * kw * 32 + lane];
    for (int s = 1; s < kw; ++s) {
      const float4 v = part[(i * kw + s) * 32 + lane];
      t[i].x = __fadd_rn(t[i].x, v.x), t[i].y = __fadd_rn(t[i].y, v.y);
      t[i].z = __fadd_rn(t[i].z, v.z), t[i].w = __fadd_rn(t[i].w, v.w);
    }
  }
  float v[NW];
  if (2 * q < R) {
    if (ok0) { for (int i = 0; i < NW; ++i) v[i] = t[i].x; emit(2 * q, col0, v); }
    if (ok1) { for (int i = 0; i < NW; ++i) v[i] = t[i].z; emit(2 * q, col0 + 8, v); }
  }
  if (2 * q + 1 < R) {
    if (ok0) { for (int i = 0; i < NW; ++i) v[i] = t[i].y; emit(2 * q + 1, col0, v); }
    if (ok1) { for (int i = 0; i < NW; ++i) v[i] = t[i].w; emit(2 * q + 1, col0 + 8, v); }
  }
}

// Output columns [16 tile, 16 tile + 16) of NW weights (same shape) for rows 0 .. rows-1 (row r at
// row_ptr(r)), in passes of 8 rows; blockDim.x = 32 L.nwarps. For each valid (row, column) one
// thread of warp 0 calls emit(r, col, v) with v[i] the fp32 sum of weight i, the arithmetic of
// lowp_mma.cuh. Contains __syncthreads: every thread of the CTA must call it. Launched by launch_pdl
// (pdl.cuh): it waits for the previous kernel before staging the rows, after its first weight loads.
template <Fmt F, int NW, typename RowPtr, typename Emit>
__device__ __forceinline__ void rows_tile(const LowpWeight* W, int64_t tile, int64_t rows, RowPtr row_ptr,
                                          int act_block, const TileLayout& L, float4* smem, Emit emit) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2;
  float4* part = smem;
  float* xs_all = reinterpret_cast<float*>(part + NW * L.kw * 32);
  float* xs = xs_all + warp * L.rt * L.ustride;
  __half* xq_all = reinterpret_cast<__half*>(xs_all + L.nwarps * L.rt * L.ustride);
  __half* xq = xq_all + warp * L.rt * L.stride;
  uint8_t* ring = reinterpret_cast<uint8_t*>(xq_all + L.nwarps * L.rt * L.stride) + warp * L.ring;
  const int units = static_cast<int>(W[0].in) / act_block, uc = act_block / kChunk, ucs = __ffs(uc) - 1;
  const int64_t col_base = tile * 16, col0 = col_base + g;
  const bool ok0 = col0 < W[0].out, ok1 = col0 + 8 < W[0].out;
  const int ncols = static_cast<int>(W[0].out - col_base < 16 ? W[0].out - col_base : 16);
  const uint8_t* base[NW];
  const uint8_t* srow[NW];  // the scale row of this lane's staging column (StageScales)
  int64_t row_bytes[NW];
#pragma unroll
  for (int w = 0; w < NW; ++w) {
    base[w] = W[w].w + col_base * W[w].row_bytes, row_bytes[w] = W[w].row_bytes;
    srow[w] = scale_row(W[w], W[w].scale, col_base + (lane & 15));
  }
  const int sh = scale_shift(W[0]);
  StageScales<F, NW> sc;
  for (int64_t r0 = 0; r0 < rows; r0 += kPassRows) {
    const int R = static_cast<int>(rows - r0 < kPassRows ? rows - r0 : kPassRows);
    for (int s = warp; s < L.kw; s += L.nwarps) {
      const int u0 = slice_begin(s, units, L.kw), u1 = slice_begin(s + 1, units, L.kw);
      const int c0 = u0 * uc, c1 = u1 * uc, nst = (c1 - c0 + kStageChunks - 1) / kStageChunks;
      auto issue = [&](int t, int slot) {  // stage t of the slice (chunks c0 + 4t ..)
        const int ca = c0 + t * kStageChunks, pc = c1 - ca < kStageChunks ? c1 - ca : kStageChunks;
        issue_stage<F, NW>(ring, L.depth, slot, base, row_bytes, ncols, ca, pc);
        sc.issue(ring, L.depth, slot, srow, sh, ca, pc);
      };
      int islot = 0;  // the ring slot of the next stage issued
      for (int t = 0; t < L.depth - 1; ++t) {  // in flight while the rows stage
        issue(t, islot);
        islot = islot + 1 == L.depth ? 0 : islot + 1;
      }
      pdl_wait();  // the weights' first stages are in flight; the rows may come from the previous kernel
      stage_warp<F>([&](int r) { return row_ptr(r0 + r); }, R, int64_t(u0) * act_block, (u1 - u0) * act_block,
                    act_block, xq, L.stride, xs, L.ustride);
      float acc[NW][4];
#pragma unroll
      for (int i = 0; i < NW; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
      for (int t = 0, cslot = 0; t < nst; ++t) {
        issue(t + L.depth - 1, islot);
        islot = islot + 1 == L.depth ? 0 : islot + 1;
        cp_async_wait_n(L.depth - 1);  // stage t has landed (this lane's pieces) ...
        __syncwarp();                 // ... and every lane's
        stage_mma<F, NW>(ring, L.depth, cslot, c0, c0 + t * kStageChunks, c1, R, xq, L.stride, xs, L.ustride, ucs, acc);
        cslot = cslot + 1 == L.depth ? 0 : cslot + 1;
        __syncwarp();  // the slot is refilled depth - 1 stages on
      }
#pragma unroll
      for (int i = 0; i < NW; ++i) part[(i * L.kw + s) * 32 + lane] = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
    }
    pdl_launch_dependents();  // the weights are streamed: the next kernel may start loading its own
    __syncthreads();
    if (warp == 0)  // slices in order: tot = acc_0, then + acc_s
      fold_emit<NW>(part, L.kw, R, col0, ok0, ok1,
                    [&](int r, int64_t col, const float (&v)[NW]) { emit(r0 + r, col, v); });
    __syncthreads();
  }
}

}  // namespace dsv4::cuda::lowp
