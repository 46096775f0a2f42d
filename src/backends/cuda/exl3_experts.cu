// Grouped EXL3 routed experts: CTA (column block, expert) finds the expert's pairs (sorted), rotates
// their rows into shared memory, decodes the expert's trellis tiles for its 128 columns (K split over
// 4 warp groups) and applies them to up to kRows pairs at a time; the output Hadamard, svh, rounding
// and SwiGLU follow in place.
#include <cuda_fp16.h>

#include <algorithm>

#include "backends/cuda/exl3_experts.cuh"
#include "core/bf16.h"

namespace dsv4::cuda {
namespace {

constexpr int kHad = 128;
constexpr int kWarps = 8;   // tile columns: 128 columns per CTA
constexpr int kGroups = 4;  // K groups: warps per tile column, partial sums added in group order
constexpr int kThreads = 32 * kWarps * kGroups;
constexpr int kRows = 4;   // pairs per pass; a launch detail, never a term of a pair's arithmetic
constexpr int kDepth = 2;  // trellis tiles in flight per lane
constexpr int kSegThreads = 1024;

// Codebook value of a 16-bit state (formats.md §1.7): one fp16 rounding as the reference decoder.
__device__ __forceinline__ float codebook_value(int cb, uint32_t state) {
  if (cb == 2) {  // mul1: 1024 + the byte sum of the hash (exact in fp16), then one fp16 fma
    const uint32_t x = state * 0x83DCD12Du;
    const uint32_t sum = 1024u + (x & 0xFF) + ((x >> 8) & 0xFF) + ((x >> 16) & 0xFF) + (x >> 24);
    return __half2float(__hfma(__uint2half_rn(sum), __ushort_as_half(0x1EEE), __ushort_as_half(0xC931)));
  }
  uint32_t x = cb == 1 ? state * 0xCBAC1FEDu : state * 89226354u + 64248484u;  // MCG or 3INST
  x = (x & 0x8FFF8FFFu) ^ 0x3B603B60u;
  return __half2float(__hadd(__ushort_as_half(static_cast<unsigned short>(x & 0xFFFF)),
                             __ushort_as_half(static_cast<unsigned short>(x >> 16))));
}

// In-place unnormalized Walsh-Hadamard transform of `count` consecutive 128-blocks, all threads.
__device__ void hadamard(float* s, int count) {
  for (int len = 1; len < kHad; len <<= 1) {
    __syncthreads();
    for (int i = threadIdx.x; i < count * kHad / 2; i += blockDim.x) {
      const int b = i / (kHad / 2), q = i % (kHad / 2);
      const int lo = b * kHad + (q / len) * (2 * len) + (q % len);
      const float a = s[lo], c = s[lo + len];
      s[lo] = a + c;
      s[lo + len] = a - c;
    }
  }
  __syncthreads();
}

// seg[0] = S, the number of expert segments of the sorted pairs; seg[1 + i] = the first pair of
// segment i, seg[1 + S] = n. One CTA: per-thread counts of segment starts, a scan, then the starts.
__global__ void __launch_bounds__(kSegThreads) segment_table(const int32_t* __restrict__ pe, int64_t n,
                                                             int32_t* __restrict__ seg) {
  __shared__ int32_t counts[kSegThreads];
  const int64_t per = (n + kSegThreads - 1) / kSegThreads;
  const int64_t p0 = min(n, threadIdx.x * per), p1 = min(n, p0 + per);
  int32_t c = 0;
  for (int64_t p = p0; p < p1; ++p) c += p == 0 || pe[p] != pe[p - 1];
  counts[threadIdx.x] = c;
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t total = 0;
    for (int i = 0; i < kSegThreads; ++i) {
      const int32_t v = counts[i];
      counts[i] = total;
      total += v;
    }
    seg[0] = total;
    seg[1 + total] = static_cast<int32_t>(n);
  }
  __syncthreads();
  int32_t k = counts[threadIdx.x];
  for (int64_t p = p0; p < p1; ++p)
    if (p == 0 || pe[p] != pe[p - 1]) seg[1 + k++] = static_cast<int32_t>(p);
}

// red[r][c] = H(u_r · Wq[:, cb*128 + c]) / 128 · svh for the CTA's 128 columns; u holds kRows rotated
// rows [kRows][in_p]. Warp (tile column tc, K group g) sums tiles [g·T/kGroups, (g+1)·T/kGroups):
// each lane its 2 columns × 4 K-rows per tile in tile order, then 2 shuffles; the kGroups partial
// sums are added in group order. `part` is scratch [kGroups][kRows][128].
__device__ void columns(const Exl3Weights& W, int cb, const float* u, float* part, float* red) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tc = warp % kWarps, g = warp / kWarps;
  const int bits = W.bits, n32 = 8 * bits, total = 256 * bits;
  const int64_t tiles_n = W.out_features / 16, nt = int64_t(cb) * kWarps + tc, in_p = W.in_features;
  const int64_t tiles_k = in_p / 16, kt0 = tiles_k * g / kGroups, kt1 = tiles_k * (g + 1) / kGroups;
  const uint32_t* t32 = reinterpret_cast<const uint32_t*>(W.trellis);
  // The lane's 8 states lie in 4 consecutive words of the circular tile stream: value j's 16 bits
  // start at bit o0 + j·bits of them (first bit most significant, formats.md §1.6).
  const int first = ((8 * lane + 1) * bits - 16 + total) % total;
  const int o0 = first % 32;
  int widx[4];
  for (int i = 0; i < 4; ++i) widx[i] = (first / 32 + i) % n32;
  const int row_base = 2 * (lane % 4);
  float acc[kRows][2] = {};
  // A ring of kDepth tiles in flight per lane; slot d always holds tile kt + d (compile-time slots).
  uint32_t ring[kDepth][4] = {};
#pragma unroll
  for (int d = 0; d < kDepth; ++d)
    if (kt0 + d < kt1)
      for (int i = 0; i < 4; ++i) ring[d][i] = __ldg(t32 + ((kt0 + d) * tiles_n + nt) * n32 + widx[i]);
  for (int64_t kb = kt0; kb < kt1; kb += kDepth) {
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      const int64_t kt = kb + d;
      if (kt >= kt1) break;
      uint32_t w[4];
      for (int i = 0; i < 4; ++i) w[i] = ring[d][i];
      if (kt + kDepth < kt1)
        for (int i = 0; i < 4; ++i) ring[d][i] = __ldg(t32 + ((kt + kDepth) * tiles_n + nt) * n32 + widx[i]);
      float v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int b = o0 + j * bits, q = b / 32, r = b % 32;  // q <= 2: b <= 31 + 7·8
        const uint32_t hi = q == 0 ? w[0] : (q == 1 ? w[1] : w[2]), lo = q == 0 ? w[1] : (q == 1 ? w[2] : w[3]);
        const uint64_t window = (uint64_t(hi) << 32) | lo;
        v[j] = codebook_value(W.codebook, static_cast<uint32_t>(window >> (48 - r)) & 0xFFFFu);
      }
      const int64_t k0 = kt * 16 + row_base;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float* ur = u + r * in_p + k0;
        // Value j sits at K row (j&1) + 8·((j>>1)&1), column lane/4 + 8·(j>>2) (trellis.h tile_position).
        acc[r][0] += ur[0] * v[0];
        acc[r][0] += ur[1] * v[1];
        acc[r][0] += ur[8] * v[2];
        acc[r][0] += ur[9] * v[3];
        acc[r][1] += ur[0] * v[4];
        acc[r][1] += ur[1] * v[5];
        acc[r][1] += ur[8] * v[6];
        acc[r][1] += ur[9] * v[7];
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r)
    for (int h = 0; h < 2; ++h) {
      float sum = acc[r][h];
      sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 1);
      sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 2);
      if (lane % 4 == 0) part[(g * kRows + r) * kHad + tc * 16 + lane / 4 + 8 * h] = sum;
    }
  __syncthreads();
  for (int i = threadIdx.x; i < kRows * kHad; i += blockDim.x) {
    float sum = part[i];
    for (int q = 1; q < kGroups; ++q) sum += part[q * kRows * kHad + i];
    red[i] = sum;
  }
  hadamard(red, kRows);
  for (int i = threadIdx.x; i < kRows * kHad; i += blockDim.x) {
    const int64_t n = int64_t(cb) * kHad + i % kHad;
    red[i] = red[i] * (1.0f / 128.0f) * __half2float(__ushort_as_half(W.svh[n]));
  }
  __syncthreads();
}

// u[r][k] = H((src row r)∘suh) per 128-block (unnormalized), zero past `in` and for r >= nr.
template <typename RowOf>
__device__ void rotate(const float* src, int64_t in, const Exl3Weights& W, int nr, RowOf row_of, float* u) {
  const int64_t in_p = W.in_features;
  for (int64_t i = threadIdx.x; i < kRows * in_p; i += blockDim.x) {
    const int r = static_cast<int>(i / in_p);
    const int64_t k = i % in_p;
    u[i] = r < nr && k < in ? src[row_of(r) * in + k] * __half2float(__ushort_as_half(W.suh[k])) : 0.f;
  }
  hadamard(u, static_cast<int>(kRows * in_p / kHad));
}

// kDown false: h[p] = SwiGLU(w1, w3 on x[pair_row[p]]); true: out[p] = w2(h[p]). grid (col blocks,
// min(E, pairs)): CTA y takes expert segment y of the table.
template <bool kDown>
__global__ void __launch_bounds__(kThreads) experts(const float* __restrict__ src, const int32_t* __restrict__ pair_row,
                                                    const int32_t* __restrict__ pair_expert,
                                                    const float* __restrict__ pair_weight,
                                                    const int32_t* __restrict__ seg, const Exl3Weights* wa,
                                                    const Exl3Weights* wb, int64_t in, int64_t out, float limit,
                                                    float* __restrict__ dst) {
  extern __shared__ float smem[];
  const int cb = blockIdx.x;
  if (static_cast<int32_t>(blockIdx.y) >= seg[0]) return;
  const int64_t q0 = seg[1 + blockIdx.y], q1 = seg[2 + blockIdx.y];
  const int32_t e = pair_expert[q0];
  const Exl3Weights A = wa[e];
  const int64_t in_p = A.in_features;
  float* u = smem;                       // [kRows][in_p]
  float* red0 = u + kRows * in_p;        // [kRows][128]
  float* red1 = red0 + kRows * kHad;     // [kRows][128] (gate/up: the up projection)
  float* part = red1 + kRows * kHad;     // [kGroups][kRows][128]
  for (int64_t p0 = q0; p0 < q1; p0 += kRows) {
    const int nr = static_cast<int>(min(int64_t(kRows), q1 - p0));
    if (kDown) {
      rotate(src, in, A, nr, [p0](int r) { return p0 + r; }, u);
      columns(A, cb, u, part, red0);
    } else {
      auto row = [p0, pair_row](int r) { return int64_t(pair_row[p0 + r]); };
      rotate(src, in, A, nr, row, u);
      columns(A, cb, u, part, red0);
      const Exl3Weights B = wb[e];
      rotate(src, in, B, nr, row, u);
      columns(B, cb, u, part, red1);
    }
    for (int i = threadIdx.x; i < nr * kHad; i += blockDim.x) {
      const int r = i / kHad;
      const int64_t n = int64_t(cb) * kHad + i % kHad;
      if (n >= out) continue;
      if (kDown) {
        dst[(p0 + r) * out + n] = round_bf16(red0[i]);
      } else {  // cpu::swiglu_clamped<float> on the bf16 outputs of the two linears
        float g = round_bf16(red0[i]), up = round_bf16(red1[i]);
        if (limit > 0) {
          up = fminf(fmaxf(up, -limit), limit);
          g = fminf(g, limit);
        }
        const float sg = __fdiv_rn(g, __fadd_rn(1.0f, expf(-g)));
        dst[(p0 + r) * out + n] = round_bf16(__fmul_rn(pair_weight[p0 + r], __fmul_rn(sg, up)));
      }
    }
    __syncthreads();  // u and red are rewritten by the next pass
  }
}

template <bool kDown>
cudaError_t launch(const float* src, const int32_t* pair_row, const int32_t* pair_expert, const float* pair_weight,
                   const int32_t* seg, int64_t segments, const Exl3Weights* wa, const Exl3Weights* wb, int64_t in,
                   int64_t in_p, int64_t out, int64_t out_p, float limit, float* dst, cudaStream_t s) {
  const size_t smem = sizeof(float) * static_cast<size_t>(kRows * in_p + (2 + kGroups) * kRows * kHad);
  auto kernel = experts<kDown>;
  if (smem > 48 * 1024) {
    const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (err != cudaSuccess) return err;
  }
  kernel<<<dim3(static_cast<unsigned>(out_p / kHad), static_cast<unsigned>(segments)), kThreads, smem, s>>>(
      src, pair_row, pair_expert, pair_weight, seg, wa, wb, in, out, limit, dst);
  return cudaGetLastError();
}

}  // namespace

size_t exl3_experts_scratch_floats(int64_t n_pairs, int64_t inter) {
  return static_cast<size_t>(n_pairs * inter) + 64 + static_cast<size_t>(n_pairs) + 2;
}

cudaError_t exl3_routed_experts(const float* x, const int32_t* pair_row, const int32_t* pair_expert,
                                const float* pair_weight, int64_t n_pairs, const Exl3ExpertsView& X,
                                float swiglu_limit, float* scratch, float* out, cudaStream_t s) {
  if (X.n_experts <= 0 || !X.w1 || !X.w2 || !X.w3 || X.dim_p % kHad || X.inter_p % kHad || X.dim > X.dim_p ||
      X.inter > X.inter_p)
    return cudaErrorInvalidValue;
  if (n_pairs <= 0) return cudaSuccess;
  float* h = scratch;  // [n_pairs, inter], then the segment table (256-byte aligned)
  const uintptr_t tail = reinterpret_cast<uintptr_t>(h + n_pairs * X.inter);
  int32_t* seg = reinterpret_cast<int32_t*>((tail + 255) & ~uintptr_t(255));
  const int64_t segments = std::min<int64_t>(X.n_experts, n_pairs);  // an upper bound on seg[0]
  segment_table<<<1, kSegThreads, 0, s>>>(pair_expert, n_pairs, seg);
  cudaError_t err = launch<false>(x, pair_row, pair_expert, pair_weight, seg, segments, X.w1, X.w3, X.dim, X.dim_p,
                                  X.inter, X.inter_p, swiglu_limit, h, s);
  if (err != cudaSuccess) return err;
  return launch<true>(h, pair_row, pair_expert, pair_weight, seg, segments, X.w2, X.w2, X.inter, X.inter_p, X.dim,
                      X.dim_p, swiglu_limit, out, s);
}

}  // namespace dsv4::cuda
