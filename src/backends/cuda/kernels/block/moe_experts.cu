// Grouped routed experts: a segment table of the expert-sorted pairs, then gate/up + SwiGLU and
// down on the tensor-core row tiles (lowp_rows.cuh), CTAs taking (expert segment, 16-column tile);
// at prefill sizes on the 64 x 64 tiles (lowp_prefill.cuh) over each segment's 64-pair pieces.
#include <algorithm>
#include <initializer_list>

#include "backends/cuda/kernels/linear/lowp_prefill.cuh"
#include "backends/cuda/kernels/linear/lowp_stream.cuh"
#include "backends/cuda/kernels/linear/lowp_wgmma.cuh"
#include "backends/cuda/kernels/block/moe_experts.cuh"
#include "backends/cuda/kernels/block/fwd_reduce.cuh"

namespace dsv4::cuda {
namespace {

using lowp::Fmt;
using lowp::LowpWeight;

constexpr int kSegThreads = 1024;
constexpr int kMaxSegCtas = 512;  // CTAs along the segment axis; each loops over segments

__device__ __forceinline__ LowpWeight as_lowp(const Fp4View& v) {
  return LowpWeight{v.w, v.scale, v.out, v.in, v.in / 2, v.in / 32, 1, 32};
}


// By the whole block: starts[k] = the first pair of segment k (a run of one expert) for k < S, then
// starts[S] = n_pairs; returns S to every thread. Thread t counts the segment starts in its run of
// pairs; the scan gives the run its first segment index.
__device__ __forceinline__ int32_t segment_starts(const int32_t* __restrict__ pair_expert, int64_t n_pairs,
                                                  int32_t* starts, int32_t* warp_total) {
  const int64_t per = (n_pairs + kSegThreads - 1) / kSegThreads;
  const int64_t p0 = std::min<int64_t>(n_pairs, threadIdx.x * per), p1 = std::min<int64_t>(n_pairs, p0 + per);
  int32_t c = 0, total = 0;
  for (int64_t p = p0; p < p1; ++p) c += (p == 0 || pair_expert[p] != pair_expert[p - 1]);
  int32_t k = block_exclusive_scan(c, warp_total, total);
  if (threadIdx.x == 0) starts[total] = static_cast<int32_t>(n_pairs);
  for (int64_t p = p0; p < p1; ++p)
    if (p == 0 || pair_expert[p] != pair_expert[p - 1]) starts[k++] = static_cast<int32_t>(p);
  return total;
}

// seg[0] = number of segments S; seg[1 .. S+1] = start pair of each segment, then n_pairs.
__global__ void __launch_bounds__(kSegThreads) segment_kernel(const int32_t* __restrict__ pair_expert,
                                                               int64_t n_pairs, int32_t* __restrict__ seg) {
  __shared__ int32_t warp_total[kSegThreads / 32];
  pdl_wait();
  pdl_launch_dependents();
  const int32_t S = segment_starts(pair_expert, n_pairs, seg + 1, warp_total);
  if (threadIdx.x == 0) seg[0] = S;
}

// Row groups of the streaming kernels: grp[0] = G; group k covers pairs [grp[1 + 2k], grp[2 + 2k]),
// up to kPassRows pairs of one held expert (pair_expert >= 0), the segments' groups in pair order (the
// 8-pair passes rows_tile takes over each segment). The segment starts go through shared memory
// (n_pairs + 1 ints of dynamic shared memory).
__global__ void __launch_bounds__(kSegThreads) groups_kernel(const int32_t* __restrict__ pair_expert, int64_t n_pairs,
                                                              int32_t* __restrict__ grp) {
  extern __shared__ int32_t starts[];
  __shared__ int32_t warp_total[kSegThreads / 32];
  pdl_wait();
  pdl_launch_dependents();
  const int32_t S = segment_starts(pair_expert, n_pairs, starts, warp_total);
  __syncthreads();
  const int32_t sper = (S + kSegThreads - 1) / kSegThreads;
  const int32_t i0 = min(S, static_cast<int32_t>(threadIdx.x) * sper), i1 = min(S, i0 + sper);
  int32_t n = 0, total = 0;
  for (int32_t i = i0; i < i1; ++i)
    if (pair_expert[starts[i]] >= 0) n += (starts[i + 1] - starts[i] + lowp::kPassRows - 1) / lowp::kPassRows;
  int32_t j = block_exclusive_scan(n, warp_total, total);
  if (threadIdx.x == 0) grp[0] = total;
  for (int32_t i = i0; i < i1; ++i) {
    if (pair_expert[starts[i]] < 0) continue;  // another tensor-parallel rank's expert
    for (int32_t a = starts[i]; a < starts[i + 1]; a += lowp::kPassRows, ++j) {
      grp[1 + 2 * j] = a;
      grp[2 + 2 * j] = min(a + lowp::kPassRows, starts[i + 1]);
    }
  }
}

// Prefill pieces of the pairs [c0, c1): tiles[0] = T; piece j covers pairs [tiles[1 + 2j], tiles[2 + 2j]),
// up to `piece` pairs of one segment (one expert) clipped to [c0, c1), the segments' pieces in segment order.
__global__ void __launch_bounds__(kSegThreads) pieces_kernel(const int32_t* __restrict__ seg, int32_t c0, int32_t c1,
                                                              int32_t piece, int32_t* __restrict__ tiles) {
  __shared__ int32_t warp_total[kSegThreads / 32];
  const int32_t S = seg[0], per = (S + kSegThreads - 1) / kSegThreads;
  const int32_t i0 = min(S, static_cast<int32_t>(threadIdx.x) * per), i1 = min(S, i0 + per);
  int32_t c = 0, total = 0;
  for (int32_t i = i0; i < i1; ++i) {
    const int32_t a = max(seg[1 + i], c0), b = min(seg[2 + i], c1);
    if (b > a) c += (b - a + piece - 1) / piece;
  }
  int32_t j = block_exclusive_scan(c, warp_total, total);
  if (threadIdx.x == 0) tiles[0] = total;
  for (int32_t i = i0; i < i1; ++i) {
    const int32_t b = min(seg[2 + i], c1);
    for (int32_t a = max(seg[1 + i], c0); a < b; a += piece, ++j) {
      tiles[1 + 2 * j] = a;
      tiles[2 + 2 * j] = min(a + piece, b);
    }
  }
}

// pieces_kernel's pieces in three lists by row tile, lists[k] for tiles of 32 << k pairs (each laid out as
// pieces_kernel's tiles; list k empty when 32 << k is under `smallest` or over `piece`): each segment's full
// pieces of `piece` pairs in list log2(piece / 32), then its remainder in the list of the smallest tile from
// `smallest` pairs up that holds it, so a short remainder does not take a full tile's MMAs. Speed only: a pair's
// arithmetic does not depend on its tile.
__global__ void __launch_bounds__(kSegThreads) split_pieces_kernel(const int32_t* __restrict__ seg, int32_t c0, int32_t c1,
                                                                    int32_t piece, int32_t smallest, int32_t* l0,
                                                                    int32_t* l1, int32_t* l2) {
  __shared__ int32_t warp_total[kSegThreads / 32];
  int32_t* lists[3] = {l0, l1, l2};
  const int32_t S = seg[0], per = (S + kSegThreads - 1) / kSegThreads;
  const int32_t i0 = min(S, static_cast<int32_t>(threadIdx.x) * per), i1 = min(S, i0 + per);
  const int full_list = piece >= 128 ? 2 : piece >= 64 ? 1 : 0;
  auto rem_list = [&](int32_t r) {
    int k = 0;
    while (k < full_list && ((32 << k) < smallest || (32 << k) < r)) ++k;
    return k;
  };
  int32_t c[3] = {0, 0, 0};
  for (int32_t i = i0; i < i1; ++i) {
    const int32_t a = max(seg[1 + i], c0), b = min(seg[2 + i], c1);
    if (b <= a) continue;
    c[full_list] += (b - a) / piece;
    if ((b - a) % piece) ++c[rem_list((b - a) % piece)];
  }
  int32_t j[3];
  for (int k = 0; k < 3; ++k) {
    int32_t total = 0;
    j[k] = block_exclusive_scan(c[k], warp_total, total);
    if (threadIdx.x == 0) lists[k][0] = total;
  }
  for (int32_t i = i0; i < i1; ++i) {
    const int32_t b = min(seg[2 + i], c1);
    int32_t a = max(seg[1 + i], c0);
    for (; b - a >= piece; a += piece, ++j[full_list]) {
      lists[full_list][1 + 2 * j[full_list]] = a;
      lists[full_list][2 + 2 * j[full_list]] = a + piece;
    }
    if (b > a) {
      const int k = rem_list(b - a);
      lists[k][1 + 2 * j[k]] = a;
      lists[k][2 + 2 * j[k]] = b;
      ++j[k];
    }
  }
}

// cpu::swiglu_clamped<float> of one element from the bf16 outputs g (w1) and up (w3), times the
// pair's routing weight, rounded to bf16 (the one definition both paths use).
__device__ __forceinline__ float swiglu_h(float g, float up, float weight, float limit) {
  if (limit > 0) {
    up = fminf(fmaxf(up, -limit), limit);
    g = fminf(g, limit);
  }
  const float sg = __fdiv_rn(g, __fadd_rn(1.0f, expf(-g)));
  return round_bf16(__fmul_rn(weight, __fmul_rn(sg, up)));
}

// kDown = false: x rows gathered by pair_row through W1 and W3 -> SwiGLU -> h. kDown = true: h rows
// through W2 -> out. CTA (i, j) takes column tile j of segments i, i + gridDim.x, ...; each pair's
// arithmetic is fp4_linear's on its row alone (same K slices, same fragments, same fold).
template <bool kDown>
__global__ void __launch_bounds__(lowp::kMaxSlices * 32, 65536 / (lowp::kMaxSlices * 32 * lowp::kRowRegs)) experts_kernel(
    const float* __restrict__ x, const int32_t* __restrict__ pair_row, const int32_t* __restrict__ pair_expert,
    const float* __restrict__ pair_weight, const Fp4View* __restrict__ w1, const Fp4View* __restrict__ w3,
    const Fp4View* __restrict__ w2, int64_t D, int64_t I, int act_block, float limit, lowp::TileLayout L,
    const int32_t* __restrict__ seg, float* __restrict__ h, float* __restrict__ out) {
  extern __shared__ float4 smem4[];
  pdl_wait();  // the segment table and the rows come from the previous kernels
  const int32_t S = seg[0];
  for (int32_t sgi = blockIdx.x; sgi < S; sgi += gridDim.x) {
    const int64_t q0 = seg[1 + sgi], q1 = seg[2 + sgi];
    const int e = pair_expert[q0];
    if (e < 0) continue;  // pairs of experts another tensor-parallel rank holds (tp_forward.h)
    if constexpr (kDown) {
      const LowpWeight W[1] = {as_lowp(w2[e])};
      lowp::rows_tile<Fmt::fp4, 1>(
          W, blockIdx.y, q1 - q0, [&](int64_t r) { return h + (q0 + r) * I; }, act_block, L, smem4,
          [&](int64_t r, int64_t col, const float (&v)[1]) { out[(q0 + r) * D + col] = round_bf16(v[0]); });
    } else {
      const LowpWeight W[2] = {as_lowp(w1[e]), as_lowp(w3[e])};
      lowp::rows_tile<Fmt::fp4, 2>(
          W, blockIdx.y, q1 - q0, [&](int64_t r) { return x + int64_t(pair_row[q0 + r]) * D; }, act_block, L, smem4,
          [&](int64_t r, int64_t col, const float (&v)[2]) {
            h[(q0 + r) * I + col] = swiglu_h(round_bf16(v[0]), round_bf16(v[1]), pair_weight[q0 + r], limit);
          });
    }
  }
}

// The streaming kernels' groups (lowp_stream.cuh): group i = the pairs [grp[1 + 2i], grp[2 + 2i]) of one
// expert. kDown = false: x rows gathered by pair_row through W1 and W3 -> SwiGLU -> h; kDown = true: h
// rows through W2 -> out. Each pair's arithmetic is experts_kernel's (fp4_linear's on its row alone).
template <bool kDown>
struct ExpertGroups {
  const float* x;
  const int32_t* pair_row;
  const int32_t* pair_expert;
  const float* pair_weight;
  const Fp4View* w1;
  const Fp4View* w3;
  const Fp4View* w2;
  const int32_t* grp;
  int64_t D, I;
  float limit;
  float* h;
  float* out;
  __device__ int32_t first(int64_t i) const { return grp[1 + 2 * i]; }
  __device__ int rows(int64_t i) const { return grp[2 + 2 * i] - grp[1 + 2 * i]; }
  __device__ const Fp4View& view(int64_t i, int k) const {
    const int e = pair_expert[first(i)];
    return kDown ? w2[e] : (k ? w3[e] : w1[e]);
  }
  __device__ const uint8_t* bytes(int64_t i, int k) const { return view(i, k).w; }
  __device__ const uint8_t* scales(int64_t i, int k) const { return view(i, k).scale; }
  __device__ const float* row(int64_t i, int r) const {
    const int64_t p = first(i) + r;
    return kDown ? h + p * I : x + int64_t(pair_row[p]) * D;
  }
  template <int NW>
  __device__ void emit(int64_t i, int r, int64_t col, const float (&v)[NW]) const {
    const int64_t p = first(i) + r;
    if constexpr (kDown) out[p * D + col] = round_bf16(v[0]);
    else h[p * I + col] = swiglu_h(round_bf16(v[0]), round_bf16(v[1]), pair_weight[p], limit);
  }
};

template <bool kDown>
__global__ void __launch_bounds__(lowp::kMaxSlices * 32, lowp::kStreamMinBlocks<kDown ? 1 : 2>)
    experts_stream_kernel(ExpertGroups<kDown> G, LowpWeight shape, int64_t tiles, int act_block, lowp::StreamLayout L) {
  extern __shared__ float4 smem4[];
  pdl_wait();  // the group table and the rows come from the previous kernels
  lowp::rows_stream<Fmt::fp4, kDown ? 1 : 2, true>(G, shape, int64_t(G.grp[0]) * tiles, tiles, act_block, L, smem4);
}

// Prefill: CTA (x, y, z) takes columns [64 x, 64 x + 64) of pieces y, y + gridDim.y, ... (tiles),
// weight w1 (z = 0, into a) or w3 (z = 1, into u) for the gate, w2 (into out) for the down. Every
// output's arithmetic is fp4_linear's on its row alone, as in experts_kernel.
template <bool kDown>
__global__ void __launch_bounds__(256, 2) experts_prefill_kernel(
    const float* __restrict__ x, const int32_t* __restrict__ pair_row, const int32_t* __restrict__ pair_expert,
    const Fp4View* __restrict__ w1, const Fp4View* __restrict__ w3, const Fp4View* __restrict__ w2, int64_t D,
    int64_t I, int act_block, int kw, const int32_t* __restrict__ tiles, float* __restrict__ a,
    float* __restrict__ u, const float* __restrict__ h, float* __restrict__ out) {
  extern __shared__ float4 smem4[];
  __shared__ const float* rows[lowp::kPRows];
  const int32_t T = tiles[0];
  for (int32_t j = blockIdx.y; j < T; j += gridDim.y) {
    const int32_t p0 = tiles[1 + 2 * j], n = tiles[2 + 2 * j] - p0;
    const int e = pair_expert[p0];
    if (e < 0) continue;  // another rank's expert (uniform over the CTA)
    __syncthreads();      // the previous piece's readers of rows[] are done
    if (static_cast<int>(threadIdx.x) < n)
      rows[threadIdx.x] = kDown ? h + int64_t(p0 + threadIdx.x) * I : x + int64_t(pair_row[p0 + threadIdx.x]) * D;
    __syncthreads();
    const int64_t col0 = int64_t(blockIdx.x) * lowp::kPCols;
    if constexpr (kDown) {
      lowp::prefill_tile<Fmt::fp4>(
          [&](int r) { return rows[r]; }, n, as_lowp(w2[e]), act_block, kw, col0, smem4,
          [&](int r, int64_t col, float v) { out[int64_t(p0 + r) * D + col] = round_bf16(v); });
    } else {
      float* y = blockIdx.z ? u : a;
      lowp::prefill_tile<Fmt::fp4>(
          [&](int r) { return rows[r]; }, n, as_lowp(blockIdx.z ? w3[e] : w1[e]), act_block, kw, col0, smem4,
          [&](int r, int64_t col, float v) { y[int64_t(p0 + r) * I + col] = round_bf16(v); });
    }
  }
}

// The many-row GEMM's pre-pass over the pairs [p0, p0 + n): act_quant of each pair's row (kDown = false:
// x's row pair_row[p]; true: h's row p) into Q's rows 0 .. n-1, rows n .. n_alloc-1 zero; in slot order
// for the warpgroup GEMM (kSlots).
template <bool kDown, bool kSlots>
__global__ void __launch_bounds__(256) experts_quant_kernel(const float* __restrict__ x,
                                                            const int32_t* __restrict__ pair_row,
                                                            const float* __restrict__ h, int64_t p0, int64_t n,
                                                            int64_t n_alloc, int64_t in, int act_block,
                                                            lowp::QuantRows Q) {
  lowp::quant_rows<Fmt::fp4, kSlots>(
      [&](int64_t r) { return kDown ? h + (p0 + r) * in : x + int64_t(pair_row[p0 + r]) * in; }, n, n_alloc, in,
      act_block, Q);
}

// The many-row GEMM over the pieces of one run of pairs starting at pair p_base (its rows quantized in Q,
// pair p at Q's row p - p_base): CTA (x, y, z) takes columns [128 x, 128 x + 128) of pieces y, y + gridDim.y,
// ... (tiles), weight w1 (z = 0, into a) or w3 (z = 1, into u) for the gate, w2 (into out) for the down.
// Every output's arithmetic is fp4_linear's on its row alone, as in experts_kernel. Row tiles of 32 NT rows
// on gemm_tile, or on gemm_wg_tile (kWg, the warpgroup MMA; NT 2 or 4).
template <bool kWg, int NT> constexpr size_t kExpertSmem = lowp::kGemmSmem<Fmt::fp4, kWg, NT>;
template <bool kDown, bool kWg, int NT>
__global__ void __launch_bounds__(lowp::kGThreads, lowp::kGemmMinBlocks<kWg, NT>) experts_gemm_kernel(
    lowp::QuantRows Q, int64_t p_base, const int32_t* __restrict__ pair_expert, const Fp4View* __restrict__ w1,
    const Fp4View* __restrict__ w3, const Fp4View* __restrict__ w2, int64_t D, int64_t I, int act_block, int kw,
    const int32_t* __restrict__ tiles, float* __restrict__ a, float* __restrict__ u, float* __restrict__ out) {
  extern __shared__ float4 smem4[];
  const int32_t T = tiles[0];
  const int64_t col0 = int64_t(blockIdx.x) * lowp::kGCols;
  for (int32_t j = blockIdx.y; j < T; j += gridDim.y) {
    const int32_t p0 = tiles[1 + 2 * j], n = tiles[2 + 2 * j] - p0;
    const int e = pair_expert[p0];
    if (e < 0) continue;  // another rank's expert (uniform over the CTA)
    const LowpWeight W = as_lowp(kDown ? w2[e] : blockIdx.z ? w3[e] : w1[e]);
    float* y = kDown ? out : blockIdx.z ? u : a;
    const int64_t ld = kDown ? D : I;
    auto emit = [&](int r, int64_t col, float v) { y[int64_t(p0 + r) * ld + col] = round_bf16(v); };
    lowp::gemm_form_tile<Fmt::fp4, kWg, NT>(Q, p0 - p_base, n, W, act_block, kw, col0,
                                             reinterpret_cast<uint8_t*>(smem4), emit);
  }
}

// h = swiglu_h(a, u) in place over a, for every pair of a held expert; CTAs over pairs.
__global__ void swiglu_pairs_kernel(float* __restrict__ a, const float* __restrict__ u,
                                    const int32_t* __restrict__ pair_expert, const float* __restrict__ pair_weight,
                                    int64_t n_pairs, int64_t I, float limit) {
  for (int64_t p = blockIdx.x; p < n_pairs; p += gridDim.x) {
    if (pair_expert[p] < 0) continue;
    const float w = pair_weight[p];
    for (int64_t i = p * I + threadIdx.x; i < (p + 1) * I; i += blockDim.x) a[i] = swiglu_h(a[i], u[i], w, limit);
  }
}

const lowp::SmCaps& caps() {  // per-device limits, read once
  static const lowp::SmCaps c = [] {
    const lowp::SmCaps r = lowp::device_caps({reinterpret_cast<const void*>(experts_kernel<false>),
                                              reinterpret_cast<const void*>(experts_kernel<true>),
                                              reinterpret_cast<const void*>(experts_stream_kernel<false>),
                                              reinterpret_cast<const void*>(experts_stream_kernel<true>)});
    // the prefill kernels also hold static shared memory (their row pointers): ask for what they use
    for (const void* k : {reinterpret_cast<const void*>(experts_prefill_kernel<false>),
                          reinterpret_cast<const void*>(experts_prefill_kernel<true>)})
      cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(lowp::prefill_smem<Fmt::fp4>()));
    auto gemm_optin = [](const void* k, size_t bytes) {
      cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    };
    gemm_optin(reinterpret_cast<const void*>(experts_gemm_kernel<false, false, 1>), kExpertSmem<false, 1>);
    gemm_optin(reinterpret_cast<const void*>(experts_gemm_kernel<false, false, 2>), kExpertSmem<false, 2>);
    gemm_optin(reinterpret_cast<const void*>(experts_gemm_kernel<false, false, 4>), kExpertSmem<false, 4>);
    gemm_optin(reinterpret_cast<const void*>(experts_gemm_kernel<true, false, 1>), kExpertSmem<false, 1>);
    gemm_optin(reinterpret_cast<const void*>(experts_gemm_kernel<true, false, 2>), kExpertSmem<false, 2>);
    gemm_optin(reinterpret_cast<const void*>(experts_gemm_kernel<true, false, 4>), kExpertSmem<false, 4>);
    gemm_optin(reinterpret_cast<const void*>(experts_gemm_kernel<false, true, 2>), kExpertSmem<true, 2>);
    gemm_optin(reinterpret_cast<const void*>(experts_gemm_kernel<false, true, 4>), kExpertSmem<true, 4>);
    gemm_optin(reinterpret_cast<const void*>(experts_gemm_kernel<true, true, 2>), kExpertSmem<true, 2>);
    gemm_optin(reinterpret_cast<const void*>(experts_gemm_kernel<true, true, 4>), kExpertSmem<true, 4>);
    return r;
  }();
  return c;
}
int smem_optin() { return static_cast<int>(caps().smem_block); }

template <bool kDown, bool kWg, int NT>
void launch_experts_gemm(const lowp::QuantRows& Q, int64_t p_base, int64_t n, const int32_t* pair_expert,
                         const Fp4View* w1, const Fp4View* w3, const Fp4View* w2, int64_t D, int64_t I, int act_block,
                         int kw, const int32_t* tiles, float* a, float* u, float* out, cudaStream_t s) {
  constexpr int R = lowp::kGRows<NT>;
  // pieces: at most n / R + one per segment; the CTAs along y loop over them
  const unsigned ys = static_cast<unsigned>(std::min<int64_t>((n + R - 1) / R + std::min<int64_t>(n, 384), 65535));
  const int64_t cols = kDown ? D : I;
  const dim3 grid(static_cast<unsigned>((cols + lowp::kGCols - 1) / lowp::kGCols), ys, kDown ? 1 : 2);
  experts_gemm_kernel<kDown, kWg, NT><<<grid, lowp::kGThreads, kExpertSmem<kWg, NT>, s>>>(
      Q, p_base, pair_expert, w1, w3, w2, D, I, act_block, kw, tiles, a, u, out);
}

// launch_experts_gemm over the three piece lists of split_pieces_kernel: NT's own tiles, then the smaller ones.
template <bool kDown, bool kWg, int NT>
void launch_experts_tiles(const lowp::QuantRows& Q, int64_t p_base, int64_t n, const int32_t* pair_expert,
                          const Fp4View* w1, const Fp4View* w3, const Fp4View* w2, int64_t D, int64_t I, int act_block,
                          int kw, int32_t* const (&lists)[3], float* a, float* u, float* out, cudaStream_t s) {
  constexpr int kList = NT == 4 ? 2 : NT == 2 ? 1 : 0;
  launch_experts_gemm<kDown, kWg, NT>(Q, p_base, n, pair_expert, w1, w3, w2, D, I, act_block, kw, lists[kList], a, u,
                                      out, s);
  // The smaller lists hold at most one piece per segment; their grids are sized as for up to 384 pieces (CTAs
  // loop over the pieces, so any size is correct).
  if constexpr (NT == 4)
    launch_experts_gemm<kDown, kWg, 2>(Q, p_base, std::min<int64_t>(n, 384), pair_expert, w1, w3, w2, D, I,
                                       act_block, kw, lists[1], a, u, out, s);
  if constexpr (NT >= 2 && !kWg)
    launch_experts_gemm<kDown, kWg, 1>(Q, p_base, std::min<int64_t>(n, 384), pair_expert, w1, w3, w2, D, I,
                                       act_block, kw, lists[0], a, u, out, s);
}

// The prefill path on the many-row GEMM: a segment table; then per run of up to gemm_chunk_rows pairs
// (each run's rows act_quant'ed once into a stream-ordered buffer) the gate and up over its pieces;
// SwiGLU over every pair; then per run the down. 32 NT pairs per row tile (lowp::experts_nt, or
// lowp::wg_experts_nt on the warpgroup MMA, kWg), each expert's remainder in the smallest tile that holds it
// (split_pieces_kernel).
template <bool kWg, int NT>
cudaError_t experts_gemm(const float* x, const int32_t* pair_row, const int32_t* pair_expert, const float* pair_weight,
                         int64_t n_pairs, const Fp4View* w1, const Fp4View* w3, const Fp4View* w2, int64_t D, int64_t I,
                         int act_block, float swiglu_limit, float* scratch, float* out, cudaStream_t s) {
  if (kExpertSmem<kWg, NT> > static_cast<size_t>(smem_optin())) return cudaErrorInvalidValue;
  constexpr int32_t kSmallestTile = kWg ? 64 : 32;  // the warpgroup form's tiles are 64 or 128 pairs
  float* a = scratch;                                                      // [n_pairs, I], then h in place
  float* u = scratch + n_pairs * I;                                        // [n_pairs, I]
  int32_t* seg = reinterpret_cast<int32_t*>(scratch + 2 * n_pairs * I);    // [n_pairs + 2]
  // per row tile of 32, 64 and 128 pairs: [1 + 2 T], T <= n_pairs / 32 + S (S <= n_pairs)
  const int64_t list_ints = 1 + 2 * (n_pairs / 32 + n_pairs + 1);
  int32_t* lists[3] = {seg + n_pairs + 2, seg + n_pairs + 2 + list_ints, seg + n_pairs + 2 + 2 * list_ints};
  const int kwg = lowp::k_slices(D, static_cast<int>(D / act_block)), kwd = lowp::k_slices(I, static_cast<int>(I / act_block));
  const int64_t chunk = lowp::gemm_chunk_rows(std::max(D, I)), pad = 128;  // pad: a piece's rows past the run
  void* buf = nullptr;
  cudaError_t e = lowp::gemm_alloc(lowp::quant_row_bytes(std::max(D, I)) * size_t(std::min(n_pairs, chunk) + pad), s, &buf);
  if (e != cudaSuccess) return e;
  segment_kernel<<<1, kSegThreads, 0, s>>>(pair_expert, n_pairs, seg);
  auto quant_blocks = [&](int64_t rows, const lowp::QuantRows& Q) {
    const int64_t items = rows * (Q.kp / lowp::kGStageK);
    return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((items + 31) / 32, int64_t(caps().sms) * 16)));
  };
  for (int kDown = 0; kDown < 2 && e == cudaSuccess; ++kDown) {
    if (kDown)
      swiglu_pairs_kernel<<<static_cast<unsigned>(std::min<int64_t>(n_pairs, 8192)), 256, 0, s>>>(
          a, u, pair_expert, pair_weight, n_pairs, I, swiglu_limit);
    for (int64_t c0 = 0; c0 < n_pairs && e == cudaSuccess; c0 += chunk) {
      const int64_t n = std::min(chunk, n_pairs - c0);
      split_pieces_kernel<<<1, kSegThreads, 0, s>>>(seg, static_cast<int32_t>(c0), static_cast<int32_t>(c0 + n),
                                                    lowp::kGRows<NT>, kSmallestTile, lists[0], lists[1], lists[2]);
      const lowp::QuantRows Q = lowp::quant_rows_at(buf, n + pad, kDown ? I : D);
      if (kDown) {
        experts_quant_kernel<true, kWg><<<quant_blocks(n + pad, Q), 256, 0, s>>>(x, pair_row, a, c0, n, n + pad, I,
                                                                                act_block, Q);
        launch_experts_tiles<true, kWg, NT>(Q, c0, n, pair_expert, w1, w3, w2, D, I, act_block, kwd, lists, a, u, out,
                                            s);
      } else {
        experts_quant_kernel<false, kWg><<<quant_blocks(n + pad, Q), 256, 0, s>>>(x, pair_row, a, c0, n, n + pad, D,
                                                                                 act_block, Q);
        launch_experts_tiles<false, kWg, NT>(Q, c0, n, pair_expert, w1, w3, w2, D, I, act_block, kwg, lists, a, u,
                                             out, s);
      }
      e = cudaGetLastError();
    }
  }
  const cudaError_t f = lowp::gemm_free(buf, s);
  return e != cudaSuccess ? e : f;
}

}  // namespace

cudaError_t moe_routed_experts(const float* x, const int32_t* pair_row, const int32_t* pair_expert,
                               const float* pair_weight, int64_t n_pairs, const Fp4View* w1, const Fp4View* w3,
                               const Fp4View* w2, int64_t D, int64_t I, int act_block, float swiglu_limit,
                               float* scratch, float* out, cudaStream_t s, int64_t tile_pairs) {
  if (n_pairs < 0 || (act_block != 32 && act_block != 64 && act_block != 128) || D % act_block || I % act_block ||
      (reinterpret_cast<uintptr_t>(x) & 15) || (reinterpret_cast<uintptr_t>(scratch) & 15))
    return cudaErrorInvalidValue;
  if (n_pairs == 0) return cudaSuccess;
  if (n_pairs >= std::max<int64_t>(1, tile_pairs) && lowp::gemm_enabled()) {  // speed only, as below
    (void)caps();
    if (lowp::wg_enabled()) {
      if (lowp::wg_experts_nt(n_pairs) == 4)
        return experts_gemm<true, 4>(x, pair_row, pair_expert, pair_weight, n_pairs, w1, w3, w2, D, I, act_block,
                                     swiglu_limit, scratch, out, s);
      return experts_gemm<true, 2>(x, pair_row, pair_expert, pair_weight, n_pairs, w1, w3, w2, D, I, act_block,
                                   swiglu_limit, scratch, out, s);
    }
    const int nt = lowp::experts_nt(n_pairs);
    if (nt == 4) return experts_gemm<false, 4>(x, pair_row, pair_expert, pair_weight, n_pairs, w1, w3, w2, D, I,
                                                     act_block, swiglu_limit, scratch, out, s);
    if (nt == 2) return experts_gemm<false, 2>(x, pair_row, pair_expert, pair_weight, n_pairs, w1, w3, w2, D, I,
                                                    act_block, swiglu_limit, scratch, out, s);
    return experts_gemm<false, 1>(x, pair_row, pair_expert, pair_weight, n_pairs, w1, w3, w2, D, I, act_block, swiglu_limit,
                           scratch, out, s);
  }
  if (n_pairs >= std::max<int64_t>(1, tile_pairs)) {  // speed only: every pair gets the bits of the row tiles
    const size_t limit = static_cast<size_t>(smem_optin());
    if (lowp::prefill_smem<Fmt::fp4>() + sizeof(const float*) * lowp::kPRows > limit) return cudaErrorInvalidValue;
    float* a = scratch;                                                      // [n_pairs, I], then h in place
    float* u = scratch + n_pairs * I;                                        // [n_pairs, I]
    int32_t* seg = reinterpret_cast<int32_t*>(scratch + 2 * n_pairs * I);    // [n_pairs + 2]
    int32_t* tiles = seg + n_pairs + 2;  // [1 + 2 T], T <= n_pairs / 64 + S (S <= n_pairs)
    segment_kernel<<<1, kSegThreads, 0, s>>>(pair_expert, n_pairs, seg);
    pieces_kernel<<<1, kSegThreads, 0, s>>>(seg, 0, static_cast<int32_t>(n_pairs), lowp::kPRows, tiles);
    const unsigned ys = static_cast<unsigned>(std::min<int64_t>((n_pairs + 63) / 64 + std::min<int64_t>(n_pairs, 384), 65535));
    const int kwg = lowp::k_slices(D, static_cast<int>(D / act_block)), kwd = lowp::k_slices(I, static_cast<int>(I / act_block));
    experts_prefill_kernel<false><<<dim3(static_cast<unsigned>((I + 63) / 64), ys, 2), 256, lowp::prefill_smem<Fmt::fp4>(), s>>>(
        x, pair_row, pair_expert, w1, w3, w2, D, I, act_block, kwg, tiles, a, u, a, out);
    swiglu_pairs_kernel<<<static_cast<unsigned>(std::min<int64_t>(n_pairs, 8192)), 256, 0, s>>>(
        a, u, pair_expert, pair_weight, n_pairs, I, swiglu_limit);
    experts_prefill_kernel<true><<<dim3(static_cast<unsigned>((D + 63) / 64), ys, 1), 256, lowp::prefill_smem<Fmt::fp4>(), s>>>(
        x, pair_row, pair_expert, w1, w3, w2, D, I, act_block, kwd, tiles, a, u, a, out);
    return cudaGetLastError();
  }
  const int64_t rows = std::min<int64_t>(n_pairs, lowp::kPassRows);  // sizes the staging only
  // Speed only (the row tiles' bits): the streaming kernels unless the benchmark override says tiles
  // (automatic: always; H200, linear_bench: 6 experts per row at rows 1 152.3 -> 125.9 us, rows 8
  // 1,304 -> 843 us).
  if (lowp::g_row_kernel != lowp::RowKernel::tiles && (n_pairs + 1) * sizeof(int32_t) <= 48 * 1024) {
    const lowp::StreamLayout Lg = lowp::stream_layout<Fmt::fp4>(D, act_block, rows, 2, caps());
    const lowp::StreamLayout Ld = lowp::stream_layout<Fmt::fp4>(I, act_block, rows, 1, caps());
    if (std::max(Lg.bytes(), Ld.bytes()) > static_cast<size_t>(smem_optin())) return cudaErrorInvalidValue;
    float* h = scratch;                                                // bf16 values [n_pairs, I]
    int32_t* grp = reinterpret_cast<int32_t*>(scratch + n_pairs * I);  // [1 + 2 n_pairs]
    const LowpWeight sg{nullptr, nullptr, I, D, D / 2, D / 32, 1, 32}, sd{nullptr, nullptr, D, I, I / 2, I / 32, 1, 32};
    const int64_t tiles_g = (I + 15) / 16, tiles_d = (D + 15) / 16;
    const int64_t ctas_g = lowp::stream_ctas(reinterpret_cast<const void*>(experts_stream_kernel<false>), Lg.kw * 32,
                                             Lg.bytes(), n_pairs * tiles_g, caps());
    const int64_t ctas_d = lowp::stream_ctas(reinterpret_cast<const void*>(experts_stream_kernel<true>), Ld.kw * 32,
                                             Ld.bytes(), n_pairs * tiles_d, caps());
    cudaError_t e = launch_pdl(groups_kernel, dim3(1), dim3(kSegThreads), (n_pairs + 1) * sizeof(int32_t), s,
                               pair_expert, n_pairs, grp);
    if (e == cudaSuccess)
      e = launch_pdl(experts_stream_kernel<false>, dim3(static_cast<unsigned>(ctas_g)), dim3(Lg.kw * 32), Lg.bytes(), s,
                     ExpertGroups<false>{x, pair_row, pair_expert, pair_weight, w1, w3, w2, grp, D, I, swiglu_limit, h, out},
                     sg, tiles_g, act_block, Lg);
    if (e == cudaSuccess)
      e = launch_pdl(experts_stream_kernel<true>, dim3(static_cast<unsigned>(ctas_d)), dim3(Ld.kw * 32), Ld.bytes(), s,
                     ExpertGroups<true>{x, pair_row, pair_expert, pair_weight, w1, w3, w2, grp, D, I, swiglu_limit, h, out},
                     sd, tiles_d, act_block, Ld);
    return e;
  }
  const unsigned seg_ctas = static_cast<unsigned>(std::min<int64_t>(n_pairs, kMaxSegCtas));
  const int64_t tiles_g = (I + 15) / 16, tiles_d = (D + 15) / 16;
  const size_t limit = static_cast<size_t>(smem_optin());
  const lowp::TileLayout Lg = lowp::tile_layout<Fmt::fp4>(D, act_block, rows, 2, seg_ctas * tiles_g, caps());
  const lowp::TileLayout Ld = lowp::tile_layout<Fmt::fp4>(I, act_block, rows, 1, seg_ctas * tiles_d, caps());
  if (std::max(Lg.bytes(), Ld.bytes()) > limit) return cudaErrorInvalidValue;
  float* h = scratch;  // bf16 values [n_pairs, I]
  int32_t* seg = reinterpret_cast<int32_t*>(scratch + n_pairs * I);  // [n_pairs + 2]
  cudaError_t e = launch_pdl(segment_kernel, dim3(1), dim3(kSegThreads), 0, s, pair_expert, n_pairs, seg);
  if (e == cudaSuccess)
    e = launch_pdl(experts_kernel<false>, dim3(seg_ctas, static_cast<unsigned>(tiles_g)), dim3(Lg.nwarps * 32), Lg.bytes(),
                   s, x, pair_row, pair_expert, pair_weight, w1, w3, w2, D, I, act_block, swiglu_limit, Lg, seg, h, out);
  if (e == cudaSuccess)
    e = launch_pdl(experts_kernel<true>, dim3(seg_ctas, static_cast<unsigned>(tiles_d)), dim3(Ld.nwarps * 32), Ld.bytes(),
                   s, x, pair_row, pair_expert, pair_weight, w1, w3, w2, D, I, act_block, swiglu_limit, Ld, seg, h, out);
  return e;
}

}  // namespace dsv4::cuda
