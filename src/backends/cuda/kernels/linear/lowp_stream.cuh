// The streaming row kernel of the FP8 / FP4 linears at up to 32 rows: a grid of resident CTAs, each
// taking a contiguous run of work items (row group, 16-column tile), its warps one K slice each,
// every warp streaming its slice of item after item through one shared-memory ring by cp.async
// (the next item's weights are in flight while this one's are multiplied). A row group's rows are
// staged once for all the tiles of the run. Each output's arithmetic is rows_tile's (lowp_rows.cuh):
// the same slices, chunks, fragments, scales and fold, so both give every element the same bits.
#pragma once

#include "backends/cuda/kernels/linear/lowp_rows.cuh"

namespace dsv4::cuda::lowp {

// Which row kernel the decode-size launches take (set_lowp_row_kernel in linear.cuh; speed only).
enum class RowKernel { tiles, automatic, stream };
inline RowKernel g_row_kernel = RowKernel::automatic;

// The automatic choice for a plain linear of n_items (8-row pass, 16-column tile) items: the
// streaming kernel from 2 rows on where the items fill every SM; one CTA per tile at 1 row (where
// rows_tile's many short CTAs all run at once) and for narrow weights (one item per SM or fewer).
// Measured on an H200 (docs/perf.md, the row-kernel sweep of linear_bench): rows 8 of wq_b 49.2 ->
// 30.0 us, wo_b 94.5 -> 43.6, the shared pair 57.9 -> 30.8; rows 1 of wq_b 23.4 -> 27.0, wq_a
// 7.7 -> 10.3 (so kept on the tiles), and wq_a / wkv at rows 8 13.3 / 12.9 -> 14.5 / 14.2.
inline bool use_stream(int64_t rows, int64_t n_items, int sms) {
  if (g_row_kernel != RowKernel::automatic) return g_row_kernel == RowKernel::stream;
  return rows > 1 && n_items >= sms;
}

// Shared memory of one streaming CTA (kw warps, warp s = slice s): partials float4 [2][nw][kw][32]
// (double-buffered by item parity), then per warp its scales float [rt][ustride], its codes f16
// [rt][stride] and its ring [nw][depth][kStageBytes] (ring bytes).
struct StreamLayout {
  int kw = 1, depth = 2, rt = 1, stride = 0, ustride = 0, nw = 1, ring = 0;
  __host__ __device__ size_t part_bytes() const { return sizeof(float4) * 2 * size_t(nw) * kw * 32; }
  __host__ __device__ size_t bytes() const {
    return part_bytes() + size_t(kw) * (sizeof(float) * size_t(rt) * ustride + 2 * size_t(rt) * stride + size_t(ring));
  }
};

// The layout for nw weights [out, in] and groups of up to min(rows, 8) rows: a ring of 2 stages (one
// in flight while one is multiplied; 3 and 4 measured no faster, docs/perf.md), fewer where they do not
// fit; depth from the benchmark override.
template <Fmt F>
inline StreamLayout stream_layout(int64_t in, int act_block, int64_t rows, int nw, const SmCaps& caps) {
  StreamLayout L;
  const int units = static_cast<int>(in / act_block);
  L.kw = k_slices(in, units);
  const int umax = (units + L.kw - 1) / L.kw;
  L.ustride = (umax + 3) & ~3;
  L.stride = umax * act_block + ((umax * act_block) % 64 == 0 ? 32 : 0);
  L.rt = static_cast<int>(rows < kPassRows ? rows : kPassRows);
  L.nw = nw;
  int depth = g_layout_override.depth > 0 ? g_layout_override.depth : 2;
  for (;; --depth) {
    L.depth = depth < 1 ? 1 : depth;
    L.ring = nw * L.depth * kStageBytes<F>;
    if (L.bytes() <= caps.smem_block || L.depth == 1) break;
  }
  return L;
}

// The streaming grid: as many CTAs of `kernel` (`threads` threads, `smem` dynamic bytes) as are
// resident on the device at once (the occupancy the compiled kernel allows), at most n_items, at
// least 1. Speed only: the items a CTA takes never change an element's arithmetic.
inline int64_t stream_ctas(const void* kernel, int threads, size_t smem, int64_t n_items, const SmCaps& caps) {
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem) != cudaSuccess || per_sm < 1)
    per_sm = 1;
  const int64_t n = int64_t(caps.sms) * per_sm;
  return n_items < 1 ? 1 : n < n_items ? n : n_items;
}

// Registers per thread the NW-weight streaming kernels may take (their launch bounds' minimum
// CTAs of 16 warps per SM): two weights hold twice the scale pointers and accumulators, and their
// rings fill an SM's shared memory at one CTA anyway, so they take 128; one weight, 64.
template <int NW>
inline constexpr int kStreamMinBlocks = NW == 2 ? 1 : 65536 / (kMaxSlices * 32 * kRowRegs);

// Items [n_items b / gridDim.x, n_items (b + 1) / gridDim.x) of CTA b; item = group * tiles + tile.
// Every weight has the shape of `shape` (its w and scale unused); Groups gives per group i:
// g.rows(i) (1 .. L.rt), g.bytes(i, w) and g.scales(i, w) (weight w's bytes and scale bytes),
// g.row(i, r) (row r's floats) and g.emit(i, r, col, v) (one thread per output). kWaited: the
// caller has passed pdl_wait (its groups come from memory the previous kernel writes); else the
// weights' first stages are issued before it. blockDim.x = 32 L.kw. Contains __syncthreads:
// every thread of the CTA must call it.
template <Fmt F, int NW, bool kWaited, typename Groups>
__device__ __forceinline__ void rows_stream(const Groups& G, const LowpWeight& shape, int64_t n_items,
                                            int64_t tiles, int act_block, const StreamLayout& L, float4* smem) {
  const int s = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2;
  const int64_t i0 = n_items * blockIdx.x / gridDim.x, i1 = n_items * (blockIdx.x + 1) / gridDim.x;
  if (i0 >= i1) return;  // uniform over the CTA
  uint8_t* const sm = reinterpret_cast<uint8_t*>(smem);
  const size_t xs_at = L.part_bytes(), xq_at = xs_at + sizeof(float) * size_t(L.kw) * L.rt * L.ustride,
               ring_at = xq_at + 2 * size_t(L.kw) * L.rt * L.stride;
  float4* part = smem;
  float* xs = reinterpret_cast<float*>(sm + xs_at) + s * L.rt * L.ustride;
  __half* xq = reinterpret_cast<__half*>(sm + xq_at) + s * L.rt * L.stride;
  uint8_t* ring = sm + ring_at + size_t(s) * L.ring;
  const int units = static_cast<int>(shape.in) / act_block, uc = act_block / kChunk, ucs = __ffs(uc) - 1;
  const int u0 = slice_begin(s, units, L.kw), u1 = slice_begin(s + 1, units, L.kw);
  const int c0 = u0 * uc, c1 = u1 * uc, nst = (c1 - c0 + kStageChunks - 1) / kStageChunks;
  int64_t row_bytes[NW];
#pragma unroll
  for (int w = 0; w < NW; ++w) row_bytes[w] = shape.row_bytes;

  // The issue cursor: stage `it` of item `ii` (tile `itile` of group `igroup`), ahead of the compute.
  int64_t ii = i0, igroup = i0 / tiles, itile = i0 - igroup * tiles;
  int it = 0, islot = 0;
  const uint8_t* ibytes[NW];
  const uint8_t* iscale[NW];
#pragma unroll
  for (int w = 0; w < NW; ++w) ibytes[w] = G.bytes(igroup, w), iscale[w] = G.scales(igroup, w);
  const int sh = scale_shift(shape);
  StageScales<F, NW> sc;
  auto issue_next = [&]() {
    if (ii < i1) {
      const int64_t col_base = itile * 16;
      const uint8_t* base[NW];
      const uint8_t* srow[NW];
#pragma unroll
      for (int w = 0; w < NW; ++w) {
        base[w] = ibytes[w] + col_base * shape.row_bytes;
        srow[w] = scale_row(shape, iscale[w], col_base + (lane & 15));
      }
      const int ncols = static_cast<int>(shape.out - col_base < 16 ? shape.out - col_base : 16);
      const int ca = c0 + it * kStageChunks, pc = c1 - ca < kStageChunks ? c1 - ca : kStageChunks;
      issue_stage<F, NW>(ring, L.depth, islot, base, row_bytes, ncols, ca, pc);
      sc.issue(ring, L.depth, islot, srow, sh, ca, pc);
      if (++it == nst) {
        it = 0;
        ++ii;
        if (++itile == tiles && ii < i1) {
          itile = 0;
          ++igroup;
#pragma unroll
          for (int w = 0; w < NW; ++w) ibytes[w] = G.bytes(igroup, w), iscale[w] = G.scales(igroup, w);
        }
      }
    } else {
      cp_async_commit();  // past the run: an empty group keeps the pending count uniform
      sc.flush(ring, L.depth);
    }
    islot = islot + 1 == L.depth ? 0 : islot + 1;
  };
  for (int t = 0; t < L.depth - 1; ++t) issue_next();  // in flight while the rows stage
  if (!kWaited) pdl_wait();  // the rows may come from the previous kernel

  int64_t staged = -1;  // the group whose rows this warp holds
  int R = 0, cslot = 0;
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t gi = i / tiles, tile = i - gi * tiles;
    if (gi != staged) {
      R = G.rows(gi);
      stage_warp<F>([&](int r) { return G.row(gi, r); }, R, int64_t(u0) * act_block, (u1 - u0) * act_block,
                    act_block, xq, L.stride, xs, L.ustride);
      staged = gi;
    }
    const int64_t col0 = tile * 16 + g;
    float acc[NW][4];
#pragma unroll
    for (int w = 0; w < NW; ++w) acc[w][0] = acc[w][1] = acc[w][2] = acc[w][3] = 0.f;
    for (int t = 0; t < nst; ++t) {
      issue_next();
      cp_async_wait_n(L.depth - 1);  // stage t of item i has landed (this lane's pieces) ...
      __syncwarp();                 // ... and every lane's
      stage_mma<F, NW>(ring, L.depth, cslot, c0, c0 + t * kStageChunks, c1, R, xq, L.stride, xs, L.ustride, ucs, acc);
      cslot = cslot + 1 == L.depth ? 0 : cslot + 1;
      __syncwarp();  // the slot is refilled depth - 1 stages on
    }
    float4* pb = part + (i & 1) * NW * L.kw * 32;
#pragma unroll
    for (int w = 0; w < NW; ++w) pb[(w * L.kw + s) * 32 + lane] = make_float4(acc[w][0], acc[w][1], acc[w][2], acc[w][3]);
    if (i + 1 == i1) pdl_launch_dependents();  // every weight of the run is streamed
    __syncthreads();  // item i's partials are complete; the other buffer was folded before this barrier
    if (s == static_cast<int>((i - i0) % L.kw))  // the folding warp rotates over the items
      fold_emit<NW>(pb, L.kw, R, col0, col0 < shape.out, col0 + 8 < shape.out,
                    [&](int r, int64_t col, const float (&v)[NW]) { G.emit(gi, r, col, v); });
  }
}

}  // namespace dsv4::cuda::lowp
