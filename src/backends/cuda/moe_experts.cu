// Grouped routed experts: a segment table of the expert-sorted pairs, then gate/up + SwiGLU and
// down, each a persistent kernel whose CTAs take (expert segment, column slice) work items.
#include <algorithm>
#include <initializer_list>

#include "backends/cuda/lowp_tile.cuh"
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

// seg[0] = number of segments S; seg[1 .. S+1] = start pair of each segment, then n_pairs.
__global__ void __launch_bounds__(kSegThreads) segment_kernel(const int32_t* __restrict__ pair_expert,
                                                               int64_t n_pairs, int32_t* __restrict__ seg) {
  __shared__ int32_t counts[kSegThreads];
  const int64_t per = (n_pairs + kSegThreads - 1) / kSegThreads;
  const int64_t p0 = std::min<int64_t>(n_pairs, threadIdx.x * per), p1 = std::min<int64_t>(n_pairs, p0 + per);
  int32_t c = 0;
  for (int64_t p = p0; p < p1; ++p) c += (p == 0 || pair_expert[p] != pair_expert[p - 1]);
  counts[threadIdx.x] = c;
  __syncthreads();
  if (threadIdx.x == 0) {  // exclusive scan (1024 adds: cheaper than a launch)
    int32_t total = 0;
    for (int i = 0; i < kSegThreads; ++i) {
      const int32_t v = counts[i];
      counts[i] = total;
      total += v;
    }
    seg[0] = total;
    seg[1 + total] = static_cast<int32_t>(n_pairs);
  }
  __syncthreads();
  int32_t k = counts[threadIdx.x];
  for (int64_t p = p0; p < p1; ++p)
    if (p == 0 || pair_expert[p] != pair_expert[p - 1]) seg[1 + k++] = static_cast<int32_t>(p);
}

template <int R>
__device__ __forceinline__ void gate_up_column(const LowpWeight& W1, const LowpWeight& W3, int64_t n, int act_block,
                                               const float* sx, const float* sxs, int64_t p0,
                                               const float* __restrict__ pair_weight, float limit,
                                               float* __restrict__ h, int64_t I) {
  float a[R], u[R];
  lowp::column_dot<Fmt::fp4, R>(W1, n, act_block, sx, sxs, a);
  lowp::column_dot<Fmt::fp4, R>(W3, n, act_block, sx, sxs, u);
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (lane == r) {
      // cpu::swiglu_clamped<float> on the bf16 outputs of the two linears
      float g = round_bf16(a[r]), up = round_bf16(u[r]);
      if (limit > 0) {
        up = fminf(fmaxf(up, -limit), limit);
        g = fminf(g, limit);
      }
      const float sg = __fdiv_rn(g, __fadd_rn(1.0f, expf(-g)));
      h[(p0 + r) * I + n] = round_bf16(__fmul_rn(pair_weight[p0 + r], __fmul_rn(sg, up)));
    }
}

template <int R>
__device__ __forceinline__ void down_column(const LowpWeight& W2, int64_t n, int act_block, const float* sx,
                                            const float* sxs, int64_t p0, float* __restrict__ out, int64_t D) {
  float acc[R];
  lowp::column_dot<Fmt::fp4, R>(W2, n, act_block, sx, sxs, acc);
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (lane == r) out[(p0 + r) * D + n] = round_bf16(acc[r]);
}

// kDown = false: x rows gathered by pair_row, W1/W3 -> h. kDown = true: h rows -> W2 -> out.
// kRowsMax 1 takes a segment's rows one at a time (fewer registers: decode, where segments hold
// one row or few), 4 stages up to 4 rows per pass; row r's arithmetic is the same code either way.
template <bool kDown, int kRowsMax>
__global__ void __launch_bounds__(lowp::kThreads, 2) experts_kernel(
    const float* __restrict__ x, const int32_t* __restrict__ pair_row, const int32_t* __restrict__ pair_expert,
    const float* __restrict__ pair_weight, const Fp4View* __restrict__ w1, const Fp4View* __restrict__ w3,
    const Fp4View* __restrict__ w2, int64_t D, int64_t I, int act_block, float limit, int rt,
    const int32_t* __restrict__ seg, float* __restrict__ h, float* __restrict__ out) {
  extern __shared__ float4 smem4[];
  const int64_t in = kDown ? I : D, ncols = kDown ? D : I;
  float* sx = reinterpret_cast<float*>(smem4);
  float* sxs = sx + static_cast<int64_t>(rt) * in;
  const int warp = threadIdx.x >> 5;
  const int32_t S = seg[0];
  bool staged_once = false;
  for (int32_t sgi = blockIdx.x; sgi < S; sgi += gridDim.x) {
    const int64_t q0 = seg[1 + sgi], q1 = seg[2 + sgi];
    const int e = pair_expert[q0];
    const LowpWeight A = as_lowp(kDown ? w2[e] : w1[e]);
    const LowpWeight B = as_lowp(kDown ? w2[e] : w3[e]);
    const int64_t n_first = static_cast<int64_t>(blockIdx.y) * lowp::kWarps + warp;
    lowp::prefetch_column<Fmt::fp4>(A, n_first, 16);
    if (!kDown) lowp::prefetch_column<Fmt::fp4>(B, n_first, 16);
    for (int64_t p0 = q0; p0 < q1; p0 += rt) {
      const int R = static_cast<int>(std::min<int64_t>(rt, q1 - p0));
      if (staged_once) __syncthreads();
      staged_once = true;
      if (kDown)
        lowp::stage_rows<Fmt::fp4>(h, in, R, act_block, [p0](int r) { return p0 + r; }, sx, sxs);
      else
        lowp::stage_rows<Fmt::fp4>(x, in, R, act_block, [p0, pair_row](int r) { return int64_t(pair_row[p0 + r]); },
                                   sx, sxs);
      for (int64_t n = static_cast<int64_t>(blockIdx.y) * lowp::kWarps + warp; n < ncols;
           n += static_cast<int64_t>(gridDim.y) * lowp::kWarps) {
        if constexpr (kRowsMax == 1) {
          if constexpr (kDown) down_column<1>(A, n, act_block, sx, sxs, p0, out, D);
          else gate_up_column<1>(A, B, n, act_block, sx, sxs, p0, pair_weight, limit, h, I);
        } else if constexpr (kDown) {
          switch (R) {
            case 1: down_column<1>(A, n, act_block, sx, sxs, p0, out, D); break;
            case 2: down_column<2>(A, n, act_block, sx, sxs, p0, out, D); break;
            case 3: down_column<3>(A, n, act_block, sx, sxs, p0, out, D); break;
            default: down_column<4>(A, n, act_block, sx, sxs, p0, out, D); break;
          }
        } else {
          switch (R) {
            case 1: gate_up_column<1>(A, B, n, act_block, sx, sxs, p0, pair_weight, limit, h, I); break;
            case 2: gate_up_column<2>(A, B, n, act_block, sx, sxs, p0, pair_weight, limit, h, I); break;
            case 3: gate_up_column<3>(A, B, n, act_block, sx, sxs, p0, pair_weight, limit, h, I); break;
            default: gate_up_column<4>(A, B, n, act_block, sx, sxs, p0, pair_weight, limit, h, I); break;
          }
        }
      }
    }
  }
}

struct Limits {
  int sms = 1, smem_optin = 48 * 1024;
};

const Limits& limits() {
  static const Limits l = [] {
    Limits d;
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev);
    cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (d.sms <= 0) d.sms = 1;
    if (d.smem_optin < 48 * 1024) d.smem_optin = 48 * 1024;
    for (const void* k : {reinterpret_cast<const void*>(experts_kernel<false, 1>),
                          reinterpret_cast<const void*>(experts_kernel<false, 4>),
                          reinterpret_cast<const void*>(experts_kernel<true, 1>),
                          reinterpret_cast<const void*>(experts_kernel<true, 4>)})
      cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, d.smem_optin);
    return d;
  }();
  return l;
}

// Up to kSingleRowPairs pairs (decode: a few rows x 6 experts) segments are taken one row at a
// time; the choice changes speed only, never a pair's arithmetic.
constexpr int64_t kSingleRowPairs = 64;

int tile_rows(int64_t in, int act_block, int64_t n_pairs, int smem_optin) {
  if (n_pairs <= kSingleRowPairs) return 1;
  int rt = lowp::kMaxTileRows;
  while (rt > 1 && lowp::stage_bytes(rt, in, act_block) > static_cast<size_t>(smem_optin)) --rt;
  return static_cast<int>(std::min<int64_t>(rt, n_pairs));
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
  const Limits& L = limits();
  if (lowp::stage_bytes(1, std::max(D, I), act_block) > static_cast<size_t>(L.smem_optin)) return cudaErrorInvalidValue;
  float* h = scratch;  // bf16 values [n_pairs, I]
  int32_t* seg = reinterpret_cast<int32_t*>(scratch + n_pairs * I);  // [n_pairs + 2]
  segment_kernel<<<1, kSegThreads, 0, s>>>(pair_expert, n_pairs, seg);
  const int64_t seg_ctas = std::min<int64_t>(n_pairs, kMaxSegCtas);
  // Column slices per segment: about 8 CTAs per SM in all (each CTA stages its rows once per
  // segment, so fewer, wider slices read less); never more than one column per warp.
  const auto col_ctas = [&](int64_t ncols) {
    const int64_t want = (int64_t(L.sms) * 8 + seg_ctas - 1) / seg_ctas;
    return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(want, (ncols + lowp::kWarps - 1) / lowp::kWarps)));
  };
  {
    const int rt = tile_rows(D, act_block, n_pairs, L.smem_optin);
    const dim3 grid(static_cast<unsigned>(seg_ctas), col_ctas(I));
    const size_t smem = lowp::stage_bytes(rt, D, act_block);
    if (rt == 1)
      experts_kernel<false, 1><<<grid, lowp::kThreads, smem, s>>>(x, pair_row, pair_expert, pair_weight, w1, w3, w2, D,
                                                                  I, act_block, swiglu_limit, rt, seg, h, out);
    else
      experts_kernel<false, 4><<<grid, lowp::kThreads, smem, s>>>(x, pair_row, pair_expert, pair_weight, w1, w3, w2, D,
                                                                  I, act_block, swiglu_limit, rt, seg, h, out);
  }
  {
    const int rt = tile_rows(I, act_block, n_pairs, L.smem_optin);
    const dim3 grid(static_cast<unsigned>(seg_ctas), col_ctas(D));
    const size_t smem = lowp::stage_bytes(rt, I, act_block);
    if (rt == 1)
      experts_kernel<true, 1><<<grid, lowp::kThreads, smem, s>>>(x, pair_row, pair_expert, pair_weight, w1, w3, w2, D, I,
                                                                 act_block, swiglu_limit, rt, seg, h, out);
    else
      experts_kernel<true, 4><<<grid, lowp::kThreads, smem, s>>>(x, pair_row, pair_expert, pair_weight, w1, w3, w2, D, I,
                                                                 act_block, swiglu_limit, rt, seg, h, out);
  }
  return cudaGetLastError();
}

}  // namespace dsv4::cuda
