// Grouped routed experts: a segment table of the expert-sorted pairs, then gate/up + SwiGLU and
// down on the tensor-core row tiles of lowp_mma.cuh, CTAs taking (expert segment, 16-column tile).
#include <algorithm>
#include <initializer_list>

#include "backends/cuda/lowp_rows.cuh"
#include "backends/cuda/moe_experts.cuh"

namespace dsv4::cuda {
namespace {

using lowp::Fmt;
using lowp::LowpWeight;

constexpr int kSegThreads = 1024;
constexpr int kMaxSegCtas = 512;  // CTAs along the segment axis; each loops over segments

__device__ __forceinline__ LowpWeight as_lowp(const Fp4View& v) {
  return LowpWeight{v.w, v.scale, v.out, v.in, v.in / 2, v.in / 32, 1, 32};
}

// seg[0] = number of segments S; seg[1 .. S+1] = start pair of each segment, then n_pairs. Thread t
// counts the segment starts in its run of pairs; a shuffle scan (warps, then the warp totals) gives
// each run its first segment index.
__global__ void __launch_bounds__(kSegThreads) segment_kernel(const int32_t* __restrict__ pair_expert,
                                                               int64_t n_pairs, int32_t* __restrict__ seg) {
  __shared__ int32_t warp_total[kSegThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t per = (n_pairs + kSegThreads - 1) / kSegThreads;
  const int64_t p0 = std::min<int64_t>(n_pairs, threadIdx.x * per), p1 = std::min<int64_t>(n_pairs, p0 + per);
  int32_t c = 0;
  for (int64_t p = p0; p < p1; ++p) c += (p == 0 || pair_expert[p] != pair_expert[p - 1]);
  int32_t incl = c;  // inclusive scan over the warp
  for (int o = 1; o < 32; o <<= 1) {
    const int32_t t = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += t;
  }
  if (lane == 31) warp_total[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    int32_t w = warp_total[lane];
    for (int o = 1; o < 32; o <<= 1) {
      const int32_t t = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += t;
    }
    warp_total[lane] = w;  // inclusive over warps 0 .. lane
  }
  __syncthreads();
  int32_t k = incl - c + (warp ? warp_total[warp - 1] : 0);
  if (threadIdx.x == kSegThreads - 1) {
    seg[0] = k + c;
    seg[1 + k + c] = static_cast<int32_t>(n_pairs);
  }
  for (int64_t p = p0; p < p1; ++p)
    if (p == 0 || pair_expert[p] != pair_expert[p - 1]) seg[1 + k++] = static_cast<int32_t>(p);
}

// kDown = false: x rows gathered by pair_row through W1 and W3 -> SwiGLU -> h. kDown = true: h rows
// through W2 -> out. CTA (i, j) takes column tile j of segments i, i + gridDim.x, ...; each pair's
// arithmetic is fp4_linear's on its row alone (same K slices, same fragments, same fold).
template <bool kDown>
__global__ void __launch_bounds__(lowp::kMaxSlices * 32, 2) experts_kernel(
    const float* __restrict__ x, const int32_t* __restrict__ pair_row, const int32_t* __restrict__ pair_expert,
    const float* __restrict__ pair_weight, const Fp4View* __restrict__ w1, const Fp4View* __restrict__ w3,
    const Fp4View* __restrict__ w2, int64_t D, int64_t I, int act_block, float limit, lowp::TileLayout L,
    const int32_t* __restrict__ seg, float* __restrict__ h, float* __restrict__ out) {
  extern __shared__ float4 smem4[];
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
            // cpu::swiglu_clamped<float> on the bf16 outputs of the two linears
            float g = round_bf16(v[0]), up = round_bf16(v[1]);
            if (limit > 0) {
              up = fminf(fmaxf(up, -limit), limit);
              g = fminf(g, limit);
            }
            const float sg = __fdiv_rn(g, __fadd_rn(1.0f, expf(-g)));
            h[(q0 + r) * I + col] = round_bf16(__fmul_rn(pair_weight[q0 + r], __fmul_rn(sg, up)));
          });
    }
  }
}

int smem_optin() {
  static const int l = [] {
    int dev = 0, v = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (v < 48 * 1024) v = 48 * 1024;
    for (const void* k : {reinterpret_cast<const void*>(experts_kernel<false>),
                          reinterpret_cast<const void*>(experts_kernel<true>)})
      cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, v);
    return v;
  }();
  return l;
}

}  // namespace

cudaError_t moe_routed_experts(const float* x, const int32_t* pair_row, const int32_t* pair_expert,
                               const float* pair_weight, int64_t n_pairs, const Fp4View* w1, const Fp4View* w3,
                               const Fp4View* w2, int64_t D, int64_t I, int act_block, float swiglu_limit,
                               float* scratch, float* out, cudaStream_t s) {
  if (n_pairs < 0 || (act_block != 32 && act_block != 64 && act_block != 128) || D % act_block || I % act_block ||
      (reinterpret_cast<uintptr_t>(x) & 15) || (reinterpret_cast<uintptr_t>(scratch) & 15))
    return cudaErrorInvalidValue;
  if (n_pairs == 0) return cudaSuccess;
  const int64_t rows = std::min<int64_t>(n_pairs, lowp::kPassRows);  // sizes the staging only
  const unsigned seg_ctas = static_cast<unsigned>(std::min<int64_t>(n_pairs, kMaxSegCtas));
  const int64_t tiles_g = (I + 15) / 16, tiles_d = (D + 15) / 16;
  const size_t limit = static_cast<size_t>(smem_optin());
  const lowp::TileLayout Lg = lowp::tile_layout<Fmt::fp4>(D, act_block, rows, 2, seg_ctas * tiles_g, limit);
  const lowp::TileLayout Ld = lowp::tile_layout<Fmt::fp4>(I, act_block, rows, 1, seg_ctas * tiles_d, limit);
  if (std::max(Lg.bytes(), Ld.bytes()) > limit) return cudaErrorInvalidValue;
  float* h = scratch;  // bf16 values [n_pairs, I]
  int32_t* seg = reinterpret_cast<int32_t*>(scratch + n_pairs * I);  // [n_pairs + 2]
  segment_kernel<<<1, kSegThreads, 0, s>>>(pair_expert, n_pairs, seg);
  experts_kernel<false><<<dim3(seg_ctas, static_cast<unsigned>(tiles_g)), Lg.nwarps * 32, Lg.bytes(), s>>>(
      x, pair_row, pair_expert, pair_weight, w1, w3, w2, D, I, act_block, swiglu_limit, Lg, seg, h, out);
  experts_kernel<true><<<dim3(seg_ctas, static_cast<unsigned>(tiles_d)), Ld.nwarps * 32, Ld.bytes(), s>>>(
      x, pair_row, pair_expert, pair_weight, w1, w3, w2, D, I, act_block, swiglu_limit, Ld, seg, h, out);
  return cudaGetLastError();
}

}  // namespace dsv4::cuda
