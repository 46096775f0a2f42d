// Engram gather and gate, MoE routing, pair sort and combine (declared in block_ops.cuh).
#include <cmath>

#include "backends/cuda/kernels/block/block_ops.cuh"
#include "backends/cuda/kernels/block/fwd_reduce.cuh"
#include "backends/cuda/kernels/block/hc_expand4.cuh"
#include "backends/cuda/runtime/pdl.cuh"
#include "core/bf16.h"
#include "core/fp8.h"
#include "core/ue8m0.h"

namespace dsv4::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void engram_gather_kernel(const uint8_t* codes, const uint8_t* scales, const int64_t* table_rows,
                                     int dim, float* u) {
  const int64_t i = blockIdx.x;
  const int64_t row = table_rows[i];
  for (int j = threadIdx.x; j < dim; j += blockDim.x)
    u[i * dim + j] = dsv4::e4m3_to_f32(codes[row * dim + j]) * dsv4::ue8m0_to_f32(scales[row * (dim / 32) + j / 32]);
}

// One block per (row, stream c).
__global__ void engram_gate_kernel(const float* kv, const float* qk, int C, int64_t D, float eps, const uint8_t* masked,
                                   float* h) {
  __shared__ float red[kThreads / 32];
  const int64_t r = blockIdx.x / C;
  const int c = static_cast<int>(blockIdx.x % C);
  float* hc = h + (r * C + c) * D;
  const float* key = kv + r * (C + 1) * D + c * D;
  const float* value = kv + r * (C + 1) * D + C * D;
  const float* w = qk + c * D;
  float a = 0.0f, b = 0.0f, g = 0.0f;
  for (int64_t i = threadIdx.x; i < D; i += kThreads) {
    a += hc[i] * hc[i];
    b += key[i] * key[i];
    g += hc[i] * w[i] * key[i];
  }
  const float hh = fwd_block_sum<kThreads>(a, red);
  const float kk = fwd_block_sum<kThreads>(b, red);
  const float sum = fwd_block_sum<kThreads>(g, red);
  const float fD = static_cast<float>(D);
  const float rstd = 1.0f / sqrtf(hh / fD + eps) * (1.0f / sqrtf(kk / fD + eps));
  const float inv_sqrt_d = static_cast<float>(1.0 / sqrt(static_cast<double>(D)));
  const float d = sum * rstd * inv_sqrt_d;
  const float mag = sqrtf(fmaxf(fabsf(d), 1e-6f));
  const float gate = masked != nullptr && masked[r] ? 0.0f : 1.0f / (1.0f + expf(-copysignf(mag, d)));
  for (int64_t i = threadIdx.x; i < D; i += kThreads) hc[i] = dsv4::round_bf16(hc[i] + gate * value[i]);
}

constexpr int kRegExperts = 512;  // up to this many experts the top-k rounds run in warp 0's registers

__device__ inline float softplusf(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Row r's routing by one block of kThreads: scores in shared memory, K rounds of a block argmax
// (ties to the lower index). sh holds score [E] and biased [E].
__device__ void route_row(int64_t r, const float* logits, int64_t E, int K, const float* bias, const float* bias_vl,
                          const uint8_t* image, float route_scale, int32_t* sel, float* wts, float* sh,
                          float* best_v, int* best_i) {
  float* score = sh;
  float* biased = sh + E;
  const float* b = (image && image[r]) ? bias_vl : bias;
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
    score[e] = sqrtf(softplusf(logits[r * E + e]));
    biased[e] = score[e] + b[e];
  }
  __syncthreads();
  if (E <= kRegExperts) {
    // Warp 0 from registers: lane l holds experts l, l + 32, ...; each round a lane's best (the
    // first of equal values), then the warp's by shuffles, (value, index) ordered as below. The
    // pick is the unique largest (value, lowest index), whatever the order it is searched in.
    if (threadIdx.x < 32) {
      const int lane = threadIdx.x;
      float v[kRegExperts / 32];
#pragma unroll
      for (int j = 0; j < kRegExperts / 32; ++j) v[j] = lane + 32 * j < E ? biased[lane + 32 * j] : -INFINITY;
      for (int k = 0; k < K; ++k) {
        float bv = -INFINITY;
        int bi = 0x7fffffff;
#pragma unroll
        for (int j = 0; j < kRegExperts / 32; ++j) {
          const int e = lane + 32 * j;
          if (e < E && (v[j] > bv || (v[j] == bv && e < bi))) { bv = v[j]; bi = e; }
        }
        for (int o = 16; o > 0; o >>= 1) {
          const float v2 = __shfl_xor_sync(0xffffffffu, bv, o);
          const int i2 = __shfl_xor_sync(0xffffffffu, bi, o);
          if (v2 > bv || (v2 == bv && i2 < bi)) { bv = v2; bi = i2; }
        }
#pragma unroll
        for (int j = 0; j < kRegExperts / 32; ++j)
          if (lane + 32 * j == bi) v[j] = -INFINITY;
        if (lane == 0) sel[r * K + k] = bi;
      }
    }
    __syncthreads();
  } else {
    for (int k = 0; k < K; ++k) {
      float bv = -INFINITY;
      int bi = 0x7fffffff;
      for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
        const float v = biased[e];
        if (v > bv || (v == bv && e < bi)) { bv = v; bi = static_cast<int>(e); }
      }
      block_argmax(bv, bi, best_v, best_i);
      if (threadIdx.x == 0) {
        sel[r * K + k] = best_i[0];
        biased[best_i[0]] = -INFINITY;
      }
      __syncthreads();
    }
  }
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (int k = 0; k < K; ++k) sum += score[sel[r * K + k]];
    for (int k = 0; k < K; ++k) {
      float w = score[sel[r * K + k]];
      if (K > 1) w = w / (sum + 1e-20f);
      wts[r * K + k] = w * route_scale;
    }
  }
  __syncthreads();
}

// One block per row.
__global__ void route_kernel(const float* logits, int64_t E, int K, const float* bias, const float* bias_vl,
                             const uint8_t* image, float route_scale, int32_t* sel, float* wts) {
  extern __shared__ float sh[];
  __shared__ float best_v[kThreads];
  __shared__ int best_i[kThreads];
  route_row(blockIdx.x, logits, E, K, bias, bias_vl, image, route_scale, sel, wts, sh, best_v, best_i);
}

// In place on c [n] (shared memory), by the whole block: c[e] = sum of c[0 .. e-1]. Thread t takes a
// contiguous run of entries; block_exclusive_scan of the run totals gives each run its start.
__device__ void exclusive_scan_block(int32_t* c, int64_t n, int32_t* scan) {
  const int64_t per = (n + blockDim.x - 1) / blockDim.x, e0 = threadIdx.x * per, e1 = e0 + per < n ? e0 + per : n;
  int32_t run = 0, total = 0;
  for (int64_t e = e0; e < e1; ++e) run += c[e];
  int32_t at = block_exclusive_scan(run, scan, total);
  for (int64_t e = e0; e < e1; ++e) {
    const int32_t k = c[e];
    c[e] = at;
    at += k;
  }
  __syncthreads();
}

// The pairs of every row by one block: thread e counts expert e's pairs, a block scan gives
// offsets, thread e writes its pairs in row order. The result depends only on sel.
__device__ void pairs_block(const int32_t* sel, const float* wts, int64_t rows, int K, int64_t E, int32_t* pair_row,
                            int32_t* pair_expert, float* pair_weight, int32_t* pair_of, int32_t* counts) {
  __shared__ int32_t scan[32];
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
    int32_t n = 0;
    for (int64_t i = 0; i < rows * K; ++i) n += sel[i] == e;
    counts[e] = n;
  }
  __syncthreads();
  exclusive_scan_block(counts, E, scan);
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
    int32_t p = counts[e];
    for (int64_t i = 0; i < rows * K; ++i)
      if (sel[i] == e) {
        pair_row[p] = static_cast<int32_t>(i / K);
        pair_expert[p] = static_cast<int32_t>(e);
        pair_weight[p] = wts[i];
        pair_of[i] = p;
        ++p;
      }
  }
}

// moe_pairs over many entries: the entries in chunks of kPairChunk, each chunk's count per expert, then
// each (expert, chunk) run's start (experts in order, chunks in order within an expert), then each chunk
// placed in entry order by one warp. The places are pairs_block's: expert first, then entry order.
constexpr int64_t kPairChunk = 1024;

__global__ void pair_counts_kernel(const int32_t* sel, int64_t n, int64_t E, int32_t* counts) {
  __shared__ int32_t c[4096];
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x) c[e] = 0;
  __syncthreads();
  const int64_t i0 = blockIdx.x * kPairChunk, i1 = i0 + kPairChunk < n ? i0 + kPairChunk : n;
  for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
    const int32_t e = sel[i];
    if (e >= 0 && e < E) atomicAdd(&c[e], 1);
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x) counts[blockIdx.x * E + e] = c[e];
}

// One block, in place on counts [chunks, E]: each (chunk, expert) count becomes its run's first place.
__global__ void pair_starts_kernel(int32_t* counts, int64_t chunks, int64_t E) {
  __shared__ int32_t total[4096];
  __shared__ int32_t scan[32];
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
    int32_t t = 0;
    for (int64_t b = 0; b < chunks; ++b) t += counts[b * E + e];
    total[e] = t;
  }
  __syncthreads();
  exclusive_scan_block(total, E, scan);
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
    int32_t at = total[e];
    for (int64_t b = 0; b < chunks; ++b) {
      const int32_t k = counts[b * E + e];
      counts[b * E + e] = at;
      at += k;
    }
  }
}

// One warp per chunk: 32 entries at a time, each placed after its run's earlier entries (the lanes of the
// same expert below it, then the run's count so far).
__global__ void pair_place_kernel(const int32_t* sel, const float* wts, int64_t n, int K, int64_t E,
                                  const int32_t* starts, int32_t* pair_row, int32_t* pair_expert, float* pair_weight,
                                  int32_t* pair_of) {
  __shared__ int32_t at[4096];
  const int lane = threadIdx.x;
  for (int64_t e = lane; e < E; e += 32) at[e] = starts[blockIdx.x * E + e];
  __syncwarp();
  const int64_t i0 = blockIdx.x * kPairChunk, i1 = i0 + kPairChunk < n ? i0 + kPairChunk : n;
  for (int64_t base = i0; base < i1; base += 32) {
    const int64_t i = base + lane;
    const int32_t v = i < i1 ? sel[i] : -1;
    const bool ok = v >= 0 && v < E;
    const int32_t key = ok ? v : -1 - lane;  // entries left out match no other lane
    const unsigned same = __match_any_sync(0xffffffffu, key);
    const int rank = __popc(same & ((1u << lane) - 1u));
    if (ok) {
      const int32_t p = at[v] + rank;
      pair_row[p] = static_cast<int32_t>(i / K);
      pair_expert[p] = v;
      pair_weight[p] = wts[i];
      pair_of[i] = p;
    }
    __syncwarp();
    if (ok && rank == 0) at[v] += __popc(same);
    __syncwarp();
  }
}

// Routing of every row, then the pairs, in one block (few rows: decode and verify rounds). sel and
// wts are written to global memory by thread 0 and read back after the block barrier.
__global__ void route_pairs_kernel(const float* logits, int64_t rows, int64_t E, int K, const float* bias,
                                   const float* bias_vl, const uint8_t* image, float route_scale, int32_t* sel,
                                   float* wts, int32_t* pair_row, int32_t* pair_expert, float* pair_weight,
                                   int32_t* pair_of) {
  extern __shared__ float sh[];
  __shared__ float best_v[kThreads];
  __shared__ int best_i[kThreads];
  __shared__ int32_t counts[4096];
  pdl_wait();
  pdl_launch_dependents();
  for (int64_t r = 0; r < rows; ++r)
    route_row(r, logits, E, K, bias, bias_vl, image, route_scale, sel, wts, sh, best_v, best_i);
  __threadfence_block();
  __syncthreads();
  pairs_block(sel, wts, rows, K, E, pair_row, pair_expert, pair_weight, pair_of, counts);
}

__global__ void combine_kernel(const float* out, const float* shared, const int32_t* sel, const int32_t* pair_of,
                               int K, int64_t D, float* y) {
  const int64_t r = blockIdx.y;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= D) return;
  int32_t e[16], p[16];
  for (int k = 0; k < K; ++k) { e[k] = sel[r * K + k]; p[k] = pair_of[r * K + k]; }
  for (int a = 1; a < K; ++a)  // ascending expert order (insertion sort of K <= 16)
    for (int b = a; b > 0 && e[b - 1] > e[b]; --b) {
      const int32_t te = e[b], tp = p[b];
      e[b] = e[b - 1]; p[b] = p[b - 1];
      e[b - 1] = te; p[b - 1] = tp;
    }
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) acc += out[static_cast<int64_t>(p[k]) * D + i];
  y[r * D + i] = dsv4::round_bf16(acc + shared[r * D + i]);
}

// combine_kernel's y value per element, then expand_kernel's update with it; block (0, r) also
// takes the row's pre-mix.
__global__ void combine_expand_kernel(const float* out, const float* shared, const int32_t* sel, const int32_t* pair_of,
                                      int K, int64_t D, const float* mix, int C, float* h, float* pi) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t r = blockIdx.y;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const float* o = mix + r * static_cast<int64_t>(C) * (C + 2);
  if (blockIdx.x == 0 && threadIdx.x < C) pi[r * C + threadIdx.x] = o[threadIdx.x];
  if (i >= D) return;
  int32_t e[16], p[16];
  for (int k = 0; k < K; ++k) { e[k] = sel[r * K + k]; p[k] = pair_of[r * K + k]; }
  for (int a = 1; a < K; ++a)  // ascending expert order (insertion sort of K <= 16)
    for (int b = a; b > 0 && e[b - 1] > e[b]; --b) {
      const int32_t te = e[b], tp = p[b];
      e[b] = e[b - 1]; p[b] = p[b - 1];
      e[b - 1] = te; p[b - 1] = tp;
    }
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) acc += out[static_cast<int64_t>(p[k]) * D + i];
  const float yv = dsv4::round_bf16(acc + shared[r * D + i]);
  const float* post = o + C;
  const float* A = o + 2 * C;
  float hv[8];
  for (int j = 0; j < C; ++j) hv[j] = h[(r * C + j) * D + i];
  for (int k = 0; k < C; ++k) {
    float s = 0.0f;
    for (int j = 0; j < C; ++j) s += A[j * C + k] * hv[j];
    h[(r * C + k) * D + i] = dsv4::round_bf16(post[k] * yv + s);
  }
}

// combine_expand_kernel for K and C known at compile time and D % 4 == 0: the row's pair order sorted once per
// block into shared memory, four elements per thread; each element's operations are combine_expand_kernel's.
template <int kK, int kC>
__global__ void combine_expand4_kernel(const float* out, const float* shared, const int32_t* sel,
                                       const int32_t* pair_of, int64_t D, const float* mix, float* h, float* pi) {
  __shared__ int32_t order[kK];
  pdl_wait();
  pdl_launch_dependents();
  const int64_t r = blockIdx.y;
  const float* o = mix + r * static_cast<int64_t>(kC) * (kC + 2);
  if (blockIdx.x == 0 && threadIdx.x < kC) pi[r * kC + threadIdx.x] = o[threadIdx.x];
  if (threadIdx.x == 0) {
    int32_t e[kK], p[kK];
    for (int k = 0; k < kK; ++k) { e[k] = sel[r * kK + k]; p[k] = pair_of[r * kK + k]; }
    for (int a = 1; a < kK; ++a)  // ascending expert order, as combine_expand_kernel sorts
      for (int b = a; b > 0 && e[b - 1] > e[b]; --b) {
        const int32_t te = e[b], tp = p[b];
        e[b] = e[b - 1]; p[b] = p[b - 1];
        e[b - 1] = te; p[b - 1] = tp;
      }
    for (int k = 0; k < kK; ++k) order[k] = p[k];
  }
  __syncthreads();
  const int64_t i = 4 * (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x);
  if (i >= D) return;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int k = 0; k < kK; ++k) {
    const float4 v = *reinterpret_cast<const float4*>(out + static_cast<int64_t>(order[k]) * D + i);
    acc[0] += v.x, acc[1] += v.y, acc[2] += v.z, acc[3] += v.w;
  }
  const float4 sh = *reinterpret_cast<const float4*>(shared + r * D + i);
  const float yv[4] = {dsv4::round_bf16(acc[0] + sh.x), dsv4::round_bf16(acc[1] + sh.y),
                       dsv4::round_bf16(acc[2] + sh.z), dsv4::round_bf16(acc[3] + sh.w)};
  hc_expand4<kC>(h, r, D, i, yv, o);
}

}  // namespace

cudaError_t moe_combine_expand(const float* out, const float* shared, const int32_t* sel, const int32_t* pair_of,
                               int64_t rows, int K, int64_t D, const float* mix, int C, float* h, float* pi,
                               cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (K > 16 || C > 8 || C > kThreads) return cudaErrorInvalidValue;
  const bool aligned = ((reinterpret_cast<uintptr_t>(out) | reinterpret_cast<uintptr_t>(shared) |
                         reinterpret_cast<uintptr_t>(h)) & 15) == 0;
  if (K == 6 && C == 4 && D % 4 == 0 && aligned) {
    const dim3 grid4(static_cast<unsigned>((D / 4 + kThreads - 1) / kThreads), static_cast<unsigned>(rows));
    return launch_pdl(combine_expand4_kernel<6, 4>, grid4, dim3(kThreads), 0, s, out, shared, sel, pair_of, D, mix, h,
                      pi);
  }
  const dim3 grid(static_cast<unsigned>((D + kThreads - 1) / kThreads), static_cast<unsigned>(rows));
  return launch_pdl(combine_expand_kernel, grid, dim3(kThreads), 0, s, out, shared, sel, pair_of, K, D, mix, C, h, pi);
}

cudaError_t engram_gather(const uint8_t* codes, const uint8_t* scales, const int64_t* table_rows, int64_t n, int dim,
                          float* u, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  engram_gather_kernel<<<static_cast<unsigned>(n), 64, 0, s>>>(codes, scales, table_rows, dim, u);
  return cudaGetLastError();
}

cudaError_t engram_gate(const float* kv, const float* qk, int64_t rows, int C, int64_t D, float eps,
                        const uint8_t* masked, float* h, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  engram_gate_kernel<<<static_cast<unsigned>(rows * C), kThreads, 0, s>>>(kv, qk, C, D, eps, masked, h);
  return cudaGetLastError();
}

cudaError_t moe_route(const float* logits, int64_t rows, int64_t E, int K, const float* bias, const float* bias_vl,
                      const uint8_t* image, float route_scale, int32_t* sel, float* wts, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (K < 1 || K > 16 || K > E) return cudaErrorInvalidValue;
  route_kernel<<<static_cast<unsigned>(rows), kThreads, 2 * E * sizeof(float), s>>>(logits, E, K, bias, bias_vl,
                                                                                   image, route_scale, sel, wts);
  return cudaGetLastError();
}

int64_t moe_pairs_scratch(int64_t rows, int K, int64_t E) {
  return (rows * K + kPairChunk - 1) / kPairChunk * E;
}

cudaError_t moe_pairs(const int32_t* sel, const float* wts, int64_t rows, int K, int64_t E, int32_t* pair_row,
                      int32_t* pair_expert, float* pair_weight, int32_t* pair_of, int32_t* scratch, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (E > 4096 || K < 1) return cudaErrorInvalidValue;
  const int64_t n = rows * K, chunks = (n + kPairChunk - 1) / kPairChunk;
  if (chunks > 2147483647) return cudaErrorInvalidValue;
  pair_counts_kernel<<<static_cast<unsigned>(chunks), 256, 0, s>>>(sel, n, E, scratch);
  pair_starts_kernel<<<1, 512, 0, s>>>(scratch, chunks, E);
  pair_place_kernel<<<static_cast<unsigned>(chunks), 32, 0, s>>>(sel, wts, n, K, E, scratch, pair_row, pair_expert,
                                                                 pair_weight, pair_of);
  return cudaGetLastError();
}

cudaError_t moe_route_pairs(const float* logits, int64_t rows, int64_t E, int K, const float* bias,
                            const float* bias_vl, const uint8_t* image, float route_scale, int32_t* sel, float* wts,
                            int32_t* pair_row, int32_t* pair_expert, float* pair_weight, int32_t* pair_of,
                            cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (K < 1 || K > 16 || K > E || E > 4096) return cudaErrorInvalidValue;
  return launch_pdl(route_pairs_kernel, dim3(1), dim3(kThreads), 2 * E * sizeof(float), s, logits, rows, E, K, bias,
                    bias_vl, image, route_scale, sel, wts, pair_row, pair_expert, pair_weight, pair_of);
}

cudaError_t moe_combine(const float* out, const float* shared, const int32_t* sel, const int32_t* pair_of,
                        int64_t rows, int K, int64_t D, float* y, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (K > 16) return cudaErrorInvalidValue;
  combine_kernel<<<dim3(static_cast<unsigned>((D + kThreads - 1) / kThreads), static_cast<unsigned>(rows)),
                   kThreads, 0, s>>>(out, shared, sel, pair_of, K, D, y);
  return cudaGetLastError();
}

}  // namespace dsv4::cuda
