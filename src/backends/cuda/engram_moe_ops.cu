// Engram gather and gate, MoE routing, pair sort and combine (declared in block_ops.cuh).
#include <cmath>

#include "backends/cuda/block_ops.cuh"
#include "backends/cuda/fwd_reduce.cuh"
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
__global__ void engram_gate_kernel(const float* kv, const float* qk, int C, int64_t D, float eps, float* h) {
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
  const float gate = 1.0f / (1.0f + expf(-copysignf(mag, d)));
  for (int64_t i = threadIdx.x; i < D; i += kThreads) hc[i] = dsv4::round_bf16(hc[i] + gate * value[i]);
}

__device__ inline float softplusf(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Row r's routing by one block of kThreads: scores in shared memory, K rounds of a block argmax
// (ties to the lower index; the maximum of a total order, so any reduction tree gives it). sh holds
// score [E] and biased [E]; wv / wi [kThreads / 32] and chosen [K] are shared scratch.
__device__ void route_row(int64_t r, const float* logits, int64_t E, int K, const float* bias, const float* bias_vl,
                          const uint8_t* image, float route_scale, int32_t* sel, float* wts, float* sh, float* wv,
                          int* wi, int* chosen) {
  constexpr unsigned kAll = 0xffffffffu;
  float* score = sh;
  float* biased = sh + E;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const float* b = (image && image[r]) ? bias_vl : bias;
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
    score[e] = sqrtf(softplusf(logits[r * E + e]));
    biased[e] = score[e] + b[e];
  }
  __syncthreads();
  for (int k = 0; k < K; ++k) {
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
      const float v = biased[e];
      if (v > bv || (v == bv && e < bi)) { bv = v; bi = static_cast<int>(e); }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float v2 = __shfl_xor_sync(kAll, bv, o);
      const int i2 = __shfl_xor_sync(kAll, bi, o);
      if (v2 > bv || (v2 == bv && i2 < bi)) { bv = v2; bi = i2; }
    }
    if (lane == 0) { wv[warp] = bv; wi[warp] = bi; }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w)
        if (wv[w] > bv || (wv[w] == bv && wi[w] < bi)) { bv = wv[w]; bi = wi[w]; }
      chosen[k] = bi;
      sel[r * K + k] = bi;
      biased[bi] = -INFINITY;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (int k = 0; k < K; ++k) sum += score[chosen[k]];
    for (int k = 0; k < K; ++k) {
      float w = score[chosen[k]];
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
  __shared__ float wv[kThreads / 32];
  __shared__ int wi[kThreads / 32], chosen[16];
  route_row(blockIdx.x, logits, E, K, bias, bias_vl, image, route_scale, sel, wts, sh, wv, wi, chosen);
}

// Block e writes expert e's pairs: its offset is the number of pairs of lower experts (an integer
// count), then its pairs in (row, slot) order by a ballot compaction over the selection. The result
// depends only on sel: pairs sorted by (expert, row), as a counting sort.
constexpr int kPairThreads = 512;

__global__ void __launch_bounds__(kPairThreads) pairs_expert_kernel(const int32_t* sel, const float* wts, int64_t P,
                                                                    int K, int32_t* pair_row, int32_t* pair_expert,
                                                                    float* pair_weight, int32_t* pair_of) {
  constexpr unsigned kAll = 0xffffffffu;
  constexpr int kWarps = kPairThreads / 32;
  __shared__ int below_w[kWarps], mine_w[kWarps];
  const int e = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int below = 0, mine = 0;
  for (int64_t i = threadIdx.x; i < P; i += kPairThreads) {
    below += sel[i] < e;
    mine += sel[i] == e;
  }
  for (int o = 16; o > 0; o >>= 1) {
    below += __shfl_xor_sync(kAll, below, o);
    mine += __shfl_xor_sync(kAll, mine, o);
  }
  if (lane == 0) { below_w[warp] = below; mine_w[warp] = mine; }
  __syncthreads();
  int64_t at = 0, count = 0;
  for (int w = 0; w < kWarps; ++w) { at += below_w[w]; count += mine_w[w]; }
  const int64_t end = at + count;
  __syncthreads();
  for (int64_t c0 = 0; c0 < P && at < end; c0 += kPairThreads) {
    const int64_t i = c0 + threadIdx.x;
    const bool f = i < P && sel[i] == e;
    const unsigned ballot = __ballot_sync(kAll, f);
    if (lane == 0) mine_w[warp] = __popc(ballot);
    __syncthreads();
    int64_t off = at, total = 0;
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp) off += mine_w[w];
      total += mine_w[w];
    }
    if (f) {
      const int64_t p = off + __popc(ballot & ((1u << lane) - 1u));
      pair_row[p] = static_cast<int32_t>(i / K);
      pair_expert[p] = e;
      pair_weight[p] = wts[i];
      pair_of[i] = static_cast<int32_t>(p);
    }
    at += total;
    __syncthreads();
  }
}

// Routing of every row, then the pairs, in one block (few rows: decode and verify rounds). A pair's
// index is its rank by (expert, (row, slot)), the order of pairs_expert_kernel.
constexpr int kMaxFusedPairs = 256;

__global__ void route_pairs_kernel(const float* logits, int64_t rows, int64_t E, int K, const float* bias,
                                   const float* bias_vl, const uint8_t* image, float route_scale, int32_t* sel,
                                   float* wts, int32_t* pair_row, int32_t* pair_expert, float* pair_weight,
                                   int32_t* pair_of) {
  extern __shared__ float sh[];
  __shared__ float wv[kThreads / 32];
  __shared__ int wi[kThreads / 32], chosen[16];
  __shared__ int32_t sel_sh[kMaxFusedPairs];
  for (int64_t r = 0; r < rows; ++r) {
    route_row(r, logits, E, K, bias, bias_vl, image, route_scale, sel, wts, sh, wv, wi, chosen);
    if (threadIdx.x < K) sel_sh[r * K + threadIdx.x] = chosen[threadIdx.x];
  }
  __threadfence_block();
  __syncthreads();
  const int64_t P = rows * K;
  for (int64_t i = threadIdx.x; i < P; i += blockDim.x) {
    const int32_t e = sel_sh[i];
    int32_t rank = 0;
    for (int64_t j = 0; j < P; ++j) rank += sel_sh[j] < e || (sel_sh[j] == e && j < i);
    pair_row[rank] = static_cast<int32_t>(i / K);
    pair_expert[rank] = e;
    pair_weight[rank] = wts[i];
    pair_of[i] = rank;
  }
}

// The row's pair indices in ascending expert order (cpu::moe_forward's combine order; a stable
// order on equal experts) into shared p [K], by threads k < K. Every thread of the block calls it.
__device__ void sorted_row_pairs(const int32_t* sel, const int32_t* pair_of, int64_t r, int K, int32_t* p) {
  if (threadIdx.x < K) {
    const int k = threadIdx.x;
    const int32_t e = sel[r * K + k];
    int rank = 0;
    for (int j = 0; j < K; ++j) {
      const int32_t ej = sel[r * K + j];
      rank += ej < e || (ej == e && j < k);
    }
    p[rank] = pair_of[r * K + k];
  }
  __syncthreads();
}

// The combined row's element i: bf16((sum over the sorted pairs of out[pair]) + shared).
__device__ inline float combined_elem(const float* out, const float* shared, const int32_t* p, int K, int64_t D,
                                      int64_t r, int64_t i) {
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) acc = __fadd_rn(acc, out[static_cast<int64_t>(p[k]) * D + i]);
  return dsv4::round_bf16(__fadd_rn(acc, shared[r * D + i]));
}

__global__ void combine_kernel(const float* out, const float* shared, const int32_t* sel, const int32_t* pair_of,
                               int K, int64_t D, float* y) {
  __shared__ int32_t p[16];
  const int64_t r = blockIdx.y;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  sorted_row_pairs(sel, pair_of, r, K, p);
  if (i < D) y[r * D + i] = combined_elem(out, shared, p, K, D, r, i);
}

// combine_kernel's y value per element, then expand_kernel's update with it; block (0, r) also
// takes the row's pre-mix.
__global__ void combine_expand_kernel(const float* out, const float* shared, const int32_t* sel, const int32_t* pair_of,
                                      int K, int64_t D, const float* mix, int C, float* h, float* pi) {
  __shared__ int32_t p[16];
  const int64_t r = blockIdx.y;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const float* o = mix + r * static_cast<int64_t>(C) * (C + 2);
  if (blockIdx.x == 0 && threadIdx.x < C) pi[r * C + threadIdx.x] = o[threadIdx.x];
  float hv[8], hn[8];
  if (i < D) {
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (j < C) hv[j] = h[(r * C + j) * D + i];
  }
  sorted_row_pairs(sel, pair_of, r, K, p);
  if (i >= D) return;
  fwd_expand_elem(o, C, combined_elem(out, shared, p, K, D, r, i), hv, hn);
#pragma unroll
  for (int k = 0; k < 8; ++k)
    if (k < C) h[(r * C + k) * D + i] = hn[k];
}

}  // namespace

cudaError_t moe_combine_expand(const float* out, const float* shared, const int32_t* sel, const int32_t* pair_of,
                               int64_t rows, int K, int64_t D, const float* mix, int C, float* h, float* pi,
                               cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (K > 16 || C > 8 || C > kThreads) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((D + kThreads - 1) / kThreads), static_cast<unsigned>(rows));
  combine_expand_kernel<<<grid, kThreads, 0, s>>>(out, shared, sel, pair_of, K, D, mix, C, h, pi);
  return cudaGetLastError();
}

cudaError_t engram_gather(const uint8_t* codes, const uint8_t* scales, const int64_t* table_rows, int64_t n, int dim,
                          float* u, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  engram_gather_kernel<<<static_cast<unsigned>(n), 64, 0, s>>>(codes, scales, table_rows, dim, u);
  return cudaGetLastError();
}

cudaError_t engram_gate(const float* kv, const float* qk, int64_t rows, int C, int64_t D, float eps, float* h,
                        cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  engram_gate_kernel<<<static_cast<unsigned>(rows * C), kThreads, 0, s>>>(kv, qk, C, D, eps, h);
  return cudaGetLastError();
}

cudaError_t moe_route(const float* logits, int64_t rows, int64_t E, int K, const float* bias, const float* bias_vl,
                      const uint8_t* image, float route_scale, int32_t* sel, float* wts, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (K < 1 || K > 16 || K > E || 2 * E * sizeof(float) > 44 * 1024) return cudaErrorInvalidValue;
  route_kernel<<<static_cast<unsigned>(rows), kThreads, 2 * E * sizeof(float), s>>>(logits, E, K, bias, bias_vl,
                                                                                   image, route_scale, sel, wts);
  return cudaGetLastError();
}

cudaError_t moe_pairs(const int32_t* sel, const float* wts, int64_t rows, int K, int64_t E, int32_t* pair_row,
                      int32_t* pair_expert, float* pair_weight, int32_t* pair_of, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (E > 0x7fffffff || rows * K > 0x7fffffff) return cudaErrorInvalidValue;
  pairs_expert_kernel<<<static_cast<unsigned>(E), kPairThreads, 0, s>>>(sel, wts, rows * K, K, pair_row, pair_expert,
                                                                         pair_weight, pair_of);
  return cudaGetLastError();
}

cudaError_t moe_route_pairs(const float* logits, int64_t rows, int64_t E, int K, const float* bias,
                            const float* bias_vl, const uint8_t* image, float route_scale, int32_t* sel, float* wts,
                            int32_t* pair_row, int32_t* pair_expert, float* pair_weight, int32_t* pair_of,
                            cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (K < 1 || K > 16 || K > E || rows * K > kMaxFusedPairs || 2 * E * sizeof(float) > 40 * 1024)
    return cudaErrorInvalidValue;
  route_pairs_kernel<<<1, kThreads, 2 * E * sizeof(float), s>>>(logits, rows, E, K, bias, bias_vl, image, route_scale,
                                                                sel, wts, pair_row, pair_expert, pair_weight, pair_of);
  return cudaGetLastError();
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
