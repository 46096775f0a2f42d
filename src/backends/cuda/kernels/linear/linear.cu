// FP8 / FP4 linears on tensor cores (lowp_mma.cuh): one CTA per 16 output columns, its warps over
// the shape's K slices, each staging its slice of up to 8 rows act_quant'ed into shared memory and
// streaming its weights through mma.m16n8k16; the slices combine in a fixed order.
#include <algorithm>

#include "backends/cuda/exl3/exl3_view.h"
#include "backends/cuda/kernels/linear/linear.cuh"
#include "backends/cuda/kernels/linear/lowp_prefill.cuh"
#include "backends/cuda/kernels/linear/lowp_stream.cuh"
#include "backends/cuda/kernels/linear/lowp_wgmma.cuh"

namespace dsv4::cuda {
namespace {

using lowp::Fmt;
using lowp::LowpWeight;

// lowp::kRowRegs registers a thread at most: two 16-warp CTAs (or four of 8) resident per SM.
constexpr int kRowMinBlocks = 65536 / (lowp::kMaxSlices * 32 * lowp::kRowRegs);

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

// The streaming row kernel's groups of a plain linear: passes of up to 8 rows of x through NW
// weights of one shape, outputs into y[w].
template <int NW>
struct PassGroups {
  const float* x;
  int64_t n, in, out;  // rows of x, the weights' shape
  const uint8_t* w[NW];
  const uint8_t* scale[NW];
  float* y[NW];
  __device__ int rows(int64_t i) const {
    return static_cast<int>(n - 8 * i < lowp::kPassRows ? n - 8 * i : lowp::kPassRows);
  }
  __device__ const uint8_t* bytes(int64_t, int k) const { return w[k]; }
  __device__ const uint8_t* scales(int64_t, int k) const { return scale[k]; }
  __device__ const float* row(int64_t i, int r) const { return x + (8 * i + r) * in; }
  __device__ void emit(int64_t i, int r, int64_t col, const float (&v)[NW]) const {
#pragma unroll
    for (int k = 0; k < NW; ++k) y[k][(8 * i + r) * out + col] = round_bf16(v[k]);
  }
};

template <Fmt F, int NW>
__global__ void __launch_bounds__(lowp::kMaxSlices * 32, lowp::kStreamMinBlocks<NW>)
    tc_stream_kernel(PassGroups<NW> G, LowpWeight shape, int64_t n_items, int64_t tiles, int act_block,
                     lowp::StreamLayout L) {
  extern __shared__ float4 smem4[];
  lowp::rows_stream<F, NW, false>(G, shape, n_items, tiles, act_block, L, smem4);
}

template <Fmt F>
__global__ void __launch_bounds__(256) tc_prefill_kernel(const float* __restrict__ x, int64_t rows, LowpWeight W,
                                                         int act_block, int kw, float* __restrict__ y) {
  extern __shared__ float4 smem4[];
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * lowp::kPRows;
  const int nrows = static_cast<int>(rows - row0 < lowp::kPRows ? rows - row0 : lowp::kPRows);
  lowp::prefill_tile<F>(
      [&](int r) { return x + (row0 + r) * W.in; }, nrows, W, act_block, kw, int64_t(blockIdx.x) * lowp::kPCols, smem4,
      [&](int r, int64_t col, float v) { y[(row0 + r) * W.out + col] = round_bf16(v); });
}

// The many-row GEMM's pre-pass: act_quant of x's rows 0 .. n-1 into Q (rows n .. rows_alloc-1 zero), in
// pair order for gemm_tile, slot order (kSlots) for gemm_wg_tile.
template <Fmt F, bool kSlots>
__global__ void __launch_bounds__(256) gemm_quant_kernel(const float* __restrict__ x, int64_t in, int64_t n,
                                                         int64_t rows_alloc, int act_block, lowp::QuantRows Q) {
  lowp::quant_rows<F, kSlots>([&](int64_t r) { return x + r * in; }, n, rows_alloc, in, act_block, Q);
}

// The many-row GEMM's CTA `id` of a launch over `rows` rows and col_tiles 128-column tiles: one CTA per
// (column tile, R-row tile), in groups of kGroup column tiles whose row tiles run in turn (the group's
// weights and the rows in flight stay in L2).
struct GemmCta {
  int64_t col_tile, row0;
  int nrows;
};
__device__ __forceinline__ GemmCta gemm_cta(int64_t id, int64_t rows, int R, int64_t col_tiles) {
  constexpr int64_t kGroup = 8;
  const int64_t row_tiles = (rows + R - 1) / R, per_group = kGroup * row_tiles;
  const int64_t grp = id / per_group, c0 = grp * kGroup;
  const int64_t gw = col_tiles - c0 < kGroup ? col_tiles - c0 : kGroup, l = id - grp * per_group;
  const int64_t row0 = (l / gw) * R;
  return GemmCta{c0 + l % gw, row0, static_cast<int>(rows - row0 < R ? rows - row0 : R)};
}

// The many-row GEMM over Q's rows 0 .. rows-1 into y [rows, W.out] (bf16 values), 32 NT-row tiles, on mma.sync
// or (kWg) the warpgroup MMA.
template <Fmt F, bool kWg, int NT>
__global__ void __launch_bounds__(lowp::kGThreads, lowp::kGemmMinBlocks<kWg, NT>)
    gemm_linear_kernel(lowp::QuantRows Q, int64_t rows, LowpWeight W, int act_block, int kw, int64_t col_tiles,
                       float* __restrict__ y) {
  extern __shared__ float4 smem4[];
  const GemmCta c = gemm_cta(blockIdx.x, rows, lowp::kGRows<NT>, col_tiles);
  lowp::gemm_form_tile<F, kWg, NT>(Q, c.row0, c.nrows, W, act_block, kw, c.col_tile * lowp::kGCols,
                                   reinterpret_cast<uint8_t*>(smem4),
                                   [&](int r, int64_t col, float v) { y[(c.row0 + r) * W.out + col] = round_bf16(v); });
}

// Per-device limits, read once (the engine runs on one device per process).
const lowp::SmCaps& caps() {
  static const lowp::SmCaps c = lowp::device_caps({reinterpret_cast<const void*>(tc_linear_kernel<Fmt::fp8>),
                                                   reinterpret_cast<const void*>(tc_linear_kernel<Fmt::fp4>),
                                                   reinterpret_cast<const void*>(tc_linear_pair_kernel<Fmt::fp8>),
                                                   reinterpret_cast<const void*>(tc_stream_kernel<Fmt::fp8, 1>),
                                                   reinterpret_cast<const void*>(tc_stream_kernel<Fmt::fp4, 1>),
                                                   reinterpret_cast<const void*>(tc_stream_kernel<Fmt::fp8, 2>),
                                                   reinterpret_cast<const void*>(tc_prefill_kernel<Fmt::fp8>),
                                                   reinterpret_cast<const void*>(tc_prefill_kernel<Fmt::fp4>),
                                                   reinterpret_cast<const void*>(gemm_linear_kernel<Fmt::fp8, false, 1>),
                                                   reinterpret_cast<const void*>(gemm_linear_kernel<Fmt::fp8, false, 2>),
                                                   reinterpret_cast<const void*>(gemm_linear_kernel<Fmt::fp8, false, 4>),
                                                   reinterpret_cast<const void*>(gemm_linear_kernel<Fmt::fp4, false, 1>),
                                                   reinterpret_cast<const void*>(gemm_linear_kernel<Fmt::fp4, false, 2>),
                                                   reinterpret_cast<const void*>(gemm_linear_kernel<Fmt::fp4, false, 4>),
                                                   reinterpret_cast<const void*>(gemm_linear_kernel<Fmt::fp8, true, 2>),
                                                   reinterpret_cast<const void*>(gemm_linear_kernel<Fmt::fp8, true, 4>),
                                                   reinterpret_cast<const void*>(gemm_linear_kernel<Fmt::fp4, true, 2>),
                                                   reinterpret_cast<const void*>(gemm_linear_kernel<Fmt::fp4, true, 4>)});
  return c;
}
int smem_optin() { return static_cast<int>(caps().smem_block); }

// Rows above which the 64 x 64 prefill tiles run (weights read once per 64 rows, not per 8): 32, and
// 16 for weights of at least kWideOut columns, whose many column tiles keep the prefill grid full
// (H200, linear_bench tile sweep in docs/perf.md: wq_b [32768, 1280] at 24 / 32 rows 147.5 / 196.8 us
// on the row tile, 118 on the prefill tiles; wq_a, wo_b, shared w2 no faster on the prefill tiles
// below 32 rows). set_lowp_tile_rows overrides it in benchmarks.
constexpr int64_t kPrefillRows = 32, kWidePrefillRows = 16, kWideOut = 16384;
int64_t g_prefill_rows = 0;
int64_t prefill_rows(int64_t out) {
  if (g_prefill_rows < 0) return 0;  // every row count on the many-row path (tests)
  return g_prefill_rows > 0 ? g_prefill_rows : out >= kWideOut ? kWidePrefillRows : kPrefillRows;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

bool bad_shape(const float* x, int64_t rows, const LowpWeight& W, int act_block) {
  return rows < 0 || W.in % 32 || (act_block != 32 && act_block != 64 && act_block != 128) || W.in % act_block ||
         !aligned16(x) || !aligned16(W.w) || W.scale_cols <= 0 || W.scale_cols % 32 ||
         ((W.scale_cols / 32) & (W.scale_cols / 32 - 1));
}

template <Fmt F, bool kWg, int NT>
cudaError_t launch_gemm_nt(const lowp::QuantRows& Q, int64_t rows, const LowpWeight& W, int act_block, int kw,
                           int64_t col_tiles, float* y, cudaStream_t s) {
  constexpr size_t smem = lowp::kGemmSmem<F, kWg, NT>;
  if (smem > static_cast<size_t>(smem_optin())) return cudaErrorInvalidValue;
  const int64_t ctas = col_tiles * ((rows + lowp::kGRows<NT> - 1) / lowp::kGRows<NT>);
  gemm_linear_kernel<F, kWg, NT><<<static_cast<unsigned>(ctas), lowp::kGThreads, smem, s>>>(Q, rows, W, act_block,
                                                                                           kw, col_tiles, y);
  return cudaGetLastError();
}

// The many-row GEMM: in pieces of gemm_chunk_rows rows, each act_quant'ed once into a stream-ordered
// buffer, then multiplied by every column tile.
template <Fmt F>
cudaError_t launch_gemm(const float* x, int64_t rows, const LowpWeight& W, int act_block, float* y, cudaStream_t s) {
  const int kw = lowp::k_slices(W.in, static_cast<int>(W.in / act_block));
  const int64_t chunk = lowp::gemm_chunk_rows(W.in), col_tiles = (W.out + lowp::kGCols - 1) / lowp::kGCols;
  const int64_t most = (std::min(rows, chunk) + 127) / 128 * 128;  // rows of the largest piece, padded
  const bool wg = lowp::wg_enabled();
  void* buf = nullptr;
  cudaError_t e = lowp::gemm_alloc(lowp::quant_row_bytes(W.in) * size_t(most), s, &buf);
  if (e != cudaSuccess) return e;
  for (int64_t r0 = 0; r0 < rows && e == cudaSuccess; r0 += chunk) {
    const int64_t n = std::min(chunk, rows - r0), n_alloc = (n + 127) / 128 * 128;
    const lowp::QuantRows Q = lowp::quant_rows_at(buf, n_alloc, W.in);
    const int64_t warps = n_alloc * (Q.kp / lowp::kGStageK);
    const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>((warps + 31) / 32, int64_t(caps().sms) * 16));
    float* yp = y + r0 * W.out;
    const auto quant = wg ? gemm_quant_kernel<F, true> : gemm_quant_kernel<F, false>;  // slot or pair order
    quant<<<static_cast<unsigned>(blocks), 256, 0, s>>>(x + r0 * W.in, W.in, n, n_alloc, act_block, Q);
    if ((e = cudaGetLastError()) != cudaSuccess) break;
    const int nt = wg ? lowp::wg_nt(n, col_tiles, caps().sms) : lowp::gemm_nt(n, col_tiles, caps().sms);
    if (wg) {
      e = nt == 4 ? launch_gemm_nt<F, true, 4>(Q, n, W, act_block, kw, col_tiles, yp, s)
                  : launch_gemm_nt<F, true, 2>(Q, n, W, act_block, kw, col_tiles, yp, s);
    } else {
      e = nt == 4   ? launch_gemm_nt<F, false, 4>(Q, n, W, act_block, kw, col_tiles, yp, s)
          : nt == 2 ? launch_gemm_nt<F, false, 2>(Q, n, W, act_block, kw, col_tiles, yp, s)
                    : launch_gemm_nt<F, false, 1>(Q, n, W, act_block, kw, col_tiles, yp, s);
    }
  }
  const cudaError_t f = lowp::gemm_free(buf, s);
  return e != cudaSuccess ? e : f;
}

template <Fmt F>
cudaError_t launch_prefill(const float* x, int64_t rows, const LowpWeight& W, int act_block, float* y, cudaStream_t s) {
  if (lowp::gemm_enabled() && lowp::gemm_takes<F>(W)) return launch_gemm<F>(x, rows, W, act_block, y, s);
  if (lowp::prefill_smem<F>() > static_cast<size_t>(smem_optin())) return cudaErrorInvalidValue;
  const int kw = lowp::k_slices(W.in, static_cast<int>(W.in / act_block));
  const dim3 grid(static_cast<unsigned>((W.out + lowp::kPCols - 1) / lowp::kPCols), static_cast<unsigned>((rows + lowp::kPRows - 1) / lowp::kPRows));
  tc_prefill_kernel<F><<<grid, 256, lowp::prefill_smem<F>(), s>>>(x, rows, W, act_block, kw, y);
  return cudaGetLastError();
}

// The streaming row kernel over weights W[0 .. NW) of one shape (rows <= 32): resident CTAs, each a
// contiguous run of (8-row pass, 16-column tile) items.
template <Fmt F, int NW>
cudaError_t launch_stream(const float* x, int64_t rows, const LowpWeight (&W)[NW], int act_block, float* const (&y)[NW],
                          cudaStream_t s) {
  const lowp::StreamLayout L = lowp::stream_layout<F>(W[0].in, act_block, rows, NW, caps());
  if (L.bytes() > static_cast<size_t>(smem_optin())) return cudaErrorInvalidValue;
  PassGroups<NW> G{x, rows, W[0].in, W[0].out, {}, {}, {}};
  for (int k = 0; k < NW; ++k) G.w[k] = W[k].w, G.scale[k] = W[k].scale, G.y[k] = y[k];
  const int64_t tiles = (W[0].out + 15) / 16, n_items = (rows + lowp::kPassRows - 1) / lowp::kPassRows * tiles;
  const int threads = L.kw * 32;
  const int64_t ctas =
      lowp::stream_ctas(reinterpret_cast<const void*>(tc_stream_kernel<F, NW>), threads, L.bytes(), n_items, caps());
  return launch_pdl(tc_stream_kernel<F, NW>, dim3(static_cast<unsigned>(ctas)), dim3(threads), L.bytes(), s, G, W[0],
                    n_items, tiles, act_block, L);
}

// Whether the row kernel that `rows` rows of nw weights [out, in] would take (streaming or one CTA per
// 16-column tile) fits shared memory: it stages each pass's rows over its whole slice of K, so a wide K
// at 8 rows a pass (DSpark's main_proj, K = 3 x 5120) does not.
template <Fmt F>
bool row_kernel_fits(int64_t in, int act_block, int64_t rows, int nw, int64_t out) {
  const int64_t tiles = (out + 15) / 16;
  const size_t bytes = lowp::use_stream(rows, (rows + lowp::kPassRows - 1) / lowp::kPassRows * tiles, caps().sms)
                           ? lowp::stream_layout<F>(in, act_block, rows, nw, caps()).bytes()
                           : lowp::tile_layout<F>(in, act_block, rows, nw, tiles, caps()).bytes();
  return bytes <= static_cast<size_t>(smem_optin());
}

template <Fmt F>
cudaError_t launch(const float* x, int64_t rows, const LowpWeight& W, int act_block, float* y, cudaStream_t s) {
  if (bad_shape(x, rows, W, act_block)) return cudaErrorInvalidValue;
  if (rows == 0 || W.out == 0) return cudaSuccess;
  // The K split is the shape's (part of every element's arithmetic); rows only size the staging.
  // Speed only, same bits: the prefill tiles above prefill_rows, and where a row kernel's staging of the
  // rows would not fit shared memory.
  if (rows > prefill_rows(W.out) || !row_kernel_fits<F>(W.in, act_block, rows, 1, W.out))
    return launch_prefill<F>(x, rows, W, act_block, y, s);
  const int64_t tiles = (W.out + 15) / 16;
  if (lowp::use_stream(rows, (rows + lowp::kPassRows - 1) / lowp::kPassRows * tiles, caps().sms)) {
    // speed only: the streaming kernel gives every element the row tile's bits
    const LowpWeight Ws[1] = {W};
    float* const ys[1] = {y};
    return launch_stream<F, 1>(x, rows, Ws, act_block, ys, s);
  }
  const lowp::TileLayout L = lowp::tile_layout<F>(W.in, act_block, rows, 1, tiles, caps());
  if (L.bytes() > static_cast<size_t>(smem_optin())) return cudaErrorInvalidValue;
  return launch_pdl(tc_linear_kernel<F>, dim3(static_cast<unsigned>(tiles)), dim3(L.nwarps * 32), L.bytes(), s, x, rows, W,
                    act_block, L, y);
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
  if (W1.exl3 || W3.exl3 || rows > prefill_rows(W1.out) ||
      (act_block > 0 && W1.in % act_block == 0 && !row_kernel_fits<Fmt::fp8>(W1.in, act_block, rows, 2, W1.out))) {
    // two launches: the same bits
    const cudaError_t e = fp8_linear(x, rows, W1, act_block, y1, s);
    return e != cudaSuccess ? e : fp8_linear(x, rows, W3, act_block, y3, s);
  }
  if (W1.block <= 0 || W1.block % 32 || W3.block != W1.block || W3.out != W1.out || W3.in != W1.in)
    return cudaErrorInvalidValue;
  const LowpWeight L1 = as_lowp(W1), L3 = as_lowp(W3);
  if (bad_shape(x, rows, L1, act_block) || !aligned16(L3.w)) return cudaErrorInvalidValue;
  if (rows == 0 || W1.out == 0) return cudaSuccess;
  const int64_t tiles = (W1.out + 15) / 16;
  if (lowp::use_stream(rows, (rows + lowp::kPassRows - 1) / lowp::kPassRows * tiles, caps().sms)) {  // as in launch
    const LowpWeight Ws[2] = {L1, L3};
    float* const ys[2] = {y1, y3};
    return launch_stream<Fmt::fp8, 2>(x, rows, Ws, act_block, ys, s);
  }
  const lowp::TileLayout L =
      lowp::tile_layout<Fmt::fp8>(W1.in, act_block, rows, 2, tiles, caps());
  if (L.bytes() > static_cast<size_t>(smem_optin())) return cudaErrorInvalidValue;
  return launch_pdl(tc_linear_pair_kernel<Fmt::fp8>, dim3(static_cast<unsigned>(tiles)), dim3(L.nwarps * 32), L.bytes(), s,
                    x, rows, L1, L3, act_block, L, y1, y3);
}

void set_lowp_tile_rows(int64_t rows) { g_prefill_rows = rows; }

void set_lowp_row_kernel(RowKernel k) {
  lowp::g_row_kernel = k == RowKernel::tiles      ? lowp::RowKernel::tiles
                       : k == RowKernel::stream ? lowp::RowKernel::stream
                                                : lowp::RowKernel::automatic;
}

void set_lowp_layout_override(int slices_per_warp, int ring_depth) {
  lowp::g_layout_override = lowp::LayoutOverride{slices_per_warp, ring_depth};
}

cudaError_t fp4_linear(const float* x, int64_t rows, const Fp4View& W, int act_block, float* y, cudaStream_t s) {
  if (W.exl3) return exl3_linear(x, rows, *W.exl3, y, Exl3Out::bf16, s);  // a pack's linear (no act_quant)
  const LowpWeight L{W.w, W.scale, W.out, W.in, W.in / 2, W.in / 32, 1, 32};
  return launch<Fmt::fp4>(x, rows, L, act_block, y, s);
}

}  // namespace dsv4::cuda
