// Logprob parts of row draws (see logprob_draws.cuh). Three passes:
//   1. per slice: its best ids as packed keys (the logit's order, NaN as -inf and -0 as +0, then the lower id: a strict
//      total order, so the row's n best are among its slices' n best): the first (the slice's first id of largest
//      logit) and the top_n, and the proposed id's logit;
//   2. per row: its first id of largest logit (its logit, raw, is top_logit), and the n best of the slices' bests;
//   3. per slice: the partition sum's fixed-point terms (partition_exp_with with CUDA's non-fusing __dadd_rn,
//      __dsub_rn and __dmul_rn, so each term is the host's double), added into the row's 128-bit sum with 64-bit
//      integer atomics and an explicit carry: integer sums, so the result does not depend on the order.
#include "backends/cuda/kernels/sample/logprob_draws.cuh"

#include <cmath>

#include "backends/cuda/kernels/sample/draw_best.cuh"
#include "lanes/partition_sum.h"

namespace dsv4::cuda {
namespace {

using draw::kSlice;
using draw::kThreads;

// lanes::partition_exp_with's operations on the device: one IEEE rounding each, never fused. (Only device code calls
// them; the host branches exist because partition_exp_with is a host function too.)
struct DeviceOps {
#ifdef __CUDA_ARCH__
  __host__ __device__ static double add(double a, double b) { return __dadd_rn(a, b); }
  __host__ __device__ static double sub(double a, double b) { return __dsub_rn(a, b); }
  __host__ __device__ static double mul(double a, double b) { return __dmul_rn(a, b); }
  __host__ __device__ static double pow2(int k) { return __longlong_as_double(static_cast<long long>(k + 1023) << 52); }
#else
  __host__ __device__ static double add(double a, double b) { return a + b; }
  __host__ __device__ static double sub(double a, double b) { return a - b; }
  __host__ __device__ static double mul(double a, double b) { return a * b; }
  __host__ __device__ static double pow2(int k) { return std::ldexp(1.0, k); }
#endif
};

__device__ inline bool wants(const RowDrawDev& d) {
  return d.kind != kDrawWhole && (d.partition || d.top_n > 0 || d.proposed >= 0);
}

// logit_value: NaN reads as -inf.
__device__ inline float value_of(float l) { return isnan(l) ? -INFINITY : l; }

// Larger packs are better: the logit's order (NaN as -inf, -0 as +0), then the lower id. 0: none.
__device__ inline unsigned long long pack_of(float l, int64_t i) {
  float x = value_of(l);
  if (x == 0.0f) x = 0.0f;
  const uint32_t b = __float_as_uint(x);
  const uint32_t key = (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
  return (static_cast<unsigned long long>(key) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(i));
}

__device__ inline unsigned long long block_max(unsigned long long mine, unsigned long long* sh) {
  sh[threadIdx.x] = mine;
  __syncthreads();
  for (int o = kThreads / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o && sh[threadIdx.x + o] > sh[threadIdx.x]) sh[threadIdx.x] = sh[threadIdx.x + o];
    __syncthreads();
  }
  const unsigned long long m = sh[0];
  __syncthreads();
  return m;
}

__global__ void __launch_bounds__(kThreads) lp_slices_kernel(const float* logits, int64_t V, const RowDrawDev* draws,
                                                             unsigned long long* bests, unsigned long long* tops,
                                                             RowPickDev* picks, int slices) {
  __shared__ unsigned long long sh[kThreads];
  const int64_t r = blockIdx.y;
  const RowDrawDev d = draws[r];
  if (!wants(d)) return;
  const float* row = logits + r * V;
  const int64_t begin = blockIdx.x * kSlice, end = begin + kSlice < V ? begin + kSlice : V;
  // Round j takes the best pack below round j-1's: round 0 is the slice's first id of largest logit, the later ones
  // its top_n.
  unsigned long long last = ~0ull;
  const int rounds = d.top_n > 1 ? d.top_n : 1;
  for (int j = 0; j < rounds; ++j) {
    unsigned long long mine = 0;
    for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
      const unsigned long long p = pack_of(row[i], i);
      if (p < last && p > mine) mine = p;
      if (j == 0 && i == d.proposed) picks[r].proposed_logit = row[i];
    }
    last = block_max(mine, sh);
    if (threadIdx.x != 0) continue;
    if (j == 0) bests[r * slices + blockIdx.x] = last;
    if (j < d.top_n) tops[(r * slices + blockIdx.x) * kDrawTop + j] = last;
  }
}

__device__ inline int64_t id_of(unsigned long long pack) {
  return static_cast<int64_t>(0xFFFFFFFFu - static_cast<uint32_t>(pack));
}

__global__ void __launch_bounds__(kThreads) lp_merge_kernel(const float* logits, int64_t V, const RowDrawDev* draws,
                                                            const unsigned long long* bests,
                                                            const unsigned long long* tops, RowPickDev* picks,
                                                            int slices) {
  __shared__ unsigned long long sh[kThreads];
  const int64_t r = blockIdx.x;
  const RowDrawDev d = draws[r];
  if (!wants(d)) return;
  if (threadIdx.x == 0) {  // the row's first id of largest logit: its own logit, bit for bit
    unsigned long long b = 0;
    for (int k = 0; k < slices; ++k) b = bests[r * slices + k] > b ? bests[r * slices + k] : b;
    picks[r].top_logit = logits[r * V + id_of(b)];
    picks[r].sum_lo = 0;
    picks[r].sum_hi = 0;
  }
  const int n = d.top_n;
  const int64_t all = static_cast<int64_t>(slices) * kDrawTop;
  unsigned long long last = ~0ull;
  int count = 0;
  for (int j = 0; j < n; ++j) {
    unsigned long long mine = 0;
    for (int64_t k = threadIdx.x; k < all; k += kThreads) {
      if (k % kDrawTop >= n) continue;
      const unsigned long long p = tops[r * all + k];
      if (p < last && p > mine) mine = p;
    }
    last = block_max(mine, sh);
    if (last == 0) break;  // fewer than n ids in the row
    if (threadIdx.x == 0) {
      picks[r].top_ids[j] = static_cast<int32_t>(id_of(last));
      picks[r].top_logits[j] = logits[r * V + id_of(last)];
    }
    ++count;
  }
  if (threadIdx.x == 0) picks[r].top_count = count;
}

__global__ void __launch_bounds__(kThreads) lp_sum_kernel(const float* logits, int64_t V, const RowDrawDev* draws,
                                                          RowPickDev* picks) {
  __shared__ unsigned __int128 sh[kThreads];
  const int64_t r = blockIdx.y;
  const RowDrawDev d = draws[r];
  if (!wants(d) || !d.partition) return;
  const float top = value_of(picks[r].top_logit);
  if (!isfinite(top)) return;  // the host reads the partition as NaN
  const double max = static_cast<double>(top);  // its zero's sign changes no term: partition_exp(+-0) = 1
  const float* row = logits + r * V;
  const int64_t begin = blockIdx.x * kSlice, end = begin + kSlice < V ? begin + kSlice : V;
  unsigned __int128 sum = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const double e = lanes::partition_exp_with<DeviceOps>(static_cast<double>(value_of(row[i])) - max);
    sum += lanes::partition_fixed(e);
  }
  sh[threadIdx.x] = sum;
  __syncthreads();
  for (int o = kThreads / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  const unsigned long long lo = static_cast<unsigned long long>(sh[0]);
  unsigned long long hi = static_cast<unsigned long long>(sh[0] >> 64);
  const unsigned long long old = atomicAdd(reinterpret_cast<unsigned long long*>(&picks[r].sum_lo), lo);
  if (old + lo < old) ++hi;  // this addition wrapped the low word: carry into the high one
  if (hi != 0) atomicAdd(reinterpret_cast<unsigned long long*>(&picks[r].sum_hi), hi);
}

size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

size_t logprob_draw_scratch_bytes(int64_t n, int64_t V) {
  const size_t parts = static_cast<size_t>(n > 0 ? n : 0) * static_cast<size_t>(row_draw_slices(V));
  return aligned(parts * sizeof(unsigned long long)) + aligned(parts * kDrawTop * sizeof(unsigned long long));
}

cudaError_t logprob_draws(const float* logits, int64_t n, int64_t V, const RowDrawDev* draws, void* scratch,
                          RowPickDev* picks, cudaStream_t s) {
  if (n <= 0 || V <= 0) return cudaSuccess;
  if (n > 65535) return cudaErrorInvalidValue;
  const int slices = static_cast<int>(row_draw_slices(V));
  const size_t parts = static_cast<size_t>(n) * static_cast<size_t>(slices);
  auto* bests = static_cast<unsigned long long*>(scratch);
  auto* tops = reinterpret_cast<unsigned long long*>(static_cast<char*>(scratch) +
                                                     aligned(parts * sizeof(unsigned long long)));
  const dim3 grid(static_cast<unsigned>(slices), static_cast<unsigned>(n));
  lp_slices_kernel<<<grid, kThreads, 0, s>>>(logits, V, draws, bests, tops, picks, slices);
  lp_merge_kernel<<<static_cast<unsigned>(n), kThreads, 0, s>>>(logits, V, draws, bests, tops, picks, slices);
  lp_sum_kernel<<<grid, kThreads, 0, s>>>(logits, V, draws, picks);
  return cudaGetLastError();
}

}  // namespace dsv4::cuda
