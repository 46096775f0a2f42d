// Truncated rows on the device (see truncated_draws.cuh): lanes/truncated_candidates.h's rule, whose proof does not
// depend on how the device places its cut, only on the certificate it checks at the end. Per row:
//   1. settle_top: the first id of largest logit a (from the slice pass) and x_top = logit_a / T, or irregular;
//   2. top-k (four levels): a radix select of the k'-th best logit key, 8 bits a level, by counting ids per digit
//      (a histogram per level, then a one-block settle that picks the digit); at the end whether exactly k' ids reach
//      it;
//   3. top-p (four levels): the same select on masses over P_k for two targets, need' (1 -+ kMassTarget), with each
//      id's mass exp(x - x_top) in fixed point (2^-44 units, truncated: integer sums, so every order gives the same
//      counts and the same digits);
//   4. best: per slice, the best (score, x) over S and the double masses of P_k, P_lo and P_hi (each thread in id
//      order, then a fixed tree), for the certificate;
//   5. candidates: each block combines the slices in order, checks lanes::mass_cut_certified, and appends the ids
//      that meet the rule; one outside S marks the row uncertain.
// A masked row reads the ids outside its mask as -inf, exactly the row draw_masked gives sample_keyed.
// Every value a row computes depends on that row only (no cross-row sums; the float sums follow fixed trees), so a
// row's pick is the same whatever rows share the launch.
#include "backends/cuda/kernels/sample/truncated_draws.cuh"

#include <cmath>

#include "backends/cuda/kernels/sample/draw_best.cuh"
#include "lanes/truncated_candidates.h"

namespace dsv4::cuda {
namespace {

using namespace draw;  // draw_best.cuh: the best-candidate order and block reductions both files share

constexpr int kLevels = 4;
enum : int { kHistCount = 0, kHistLo = kLevels, kHistHi = 2 * kLevels, kHists = 3 * kLevels };
constexpr double kMassScale = 0x1.0p44;  // fixed-point unit of the location masses (sums of <= 2^17 ids < 2^62)

enum : int32_t { kGoing = 0, kIrregular = 1, kUncertain = 2 };

// One truncated row's cut as the passes find it.
struct TruncState {
  int64_t a;           // first id of largest logit
  double x_top;        // logit_a / T
  int32_t status;      // kGoing, kIrregular, kUncertain
  int32_t k_on;        // a top-k cut: P_k = {key >= k_prefix} after the four levels
  uint32_t k_prefix;   // the key digits found so far
  int32_t k_exact;     // exactly k' ids reach the key
  uint64_t k_rem;      // ids still to place at the current prefix
  int32_t p_on;        // a top-p cut
  int32_t hi_on;       // the upper target is still being placed (else P_hi = P_k)
  uint32_t lo_prefix;  // digits of t_lo and t_hi
  uint32_t hi_prefix;
  uint64_t lo_rem;     // fixed-point mass still to reach at the current prefixes
  uint64_t hi_rem;
};

// One slice's part of pass 4.
struct TruncPart {
  double score;
  double x;
  int64_t id;
  double total;  // masses of P_k, P_lo, P_hi in the slice
  double m_lo;
  double m_hi;
};

struct CutKeys {
  uint32_t pk, lo, hi;  // P_k = {key >= pk}, P_lo = {key >= lo}, P_hi = {key >= hi}
};

__device__ inline uint32_t order_key(float x) {  // lanes::logit_order_key
  if (x == 0.0f) x = 0.0f;
  const uint32_t b = __float_as_uint(x);
  return (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
}

__device__ inline double mass_of(float logit, double temperature, double x_top) {
  return exp(static_cast<double>(logit) / temperature - x_top);
}

__device__ inline CutKeys cut_keys(const TruncState& st) {
  CutKeys k;
  k.pk = st.k_on ? st.k_prefix : 0u;
  if (st.p_on) {
    k.lo = st.lo_prefix + 1;
    k.hi = st.hi_on ? st.hi_prefix : k.pk;
  } else if (st.k_on) {
    k.hi = st.k_prefix;
    k.lo = st.k_exact ? st.k_prefix : st.k_prefix + 1;
  } else {
    k.lo = k.hi = 0;
  }
  return k;
}

// The digit at `level` where the running sum of h (highest digit first) first reaches rem (>= 1); -1 if it never
// does. *below: the sum of the digits above it.
__device__ inline int select_digit(const unsigned long long* h, uint64_t rem, uint64_t* below) {
  uint64_t cum = 0;
  for (int b = 255; b >= 0; --b) {
    if (h[b] > 0 && cum + h[b] >= rem) {
      *below = cum;
      return b;
    }
    cum += h[b];
  }
  return -1;
}

__device__ inline bool truncated_row(const RowDrawDev* draws, int64_t r) { return draws[r].kind == kDrawTruncated; }

// The row's mask words (null: none).
__device__ inline const uint64_t* mask_of(const RowDrawDev& d, const uint64_t* masks) {
  return d.mask >= 0 ? masks + d.mask : nullptr;
}

// Logit i of the row as draw_masked's masked copy holds it: -inf outside the mask.
__device__ inline float logit_at(const float* row, const uint64_t* mask, int64_t i) {
  return draw::allowed(mask, i) ? row[i] : -INFINITY;
}

__global__ void settle_top_kernel(const RowDrawDev* draws, const DrawPartDev* parts, int slices, TruncState* states,
                                  RowPickDev* picks) {
  const int64_t r = blockIdx.x;
  if (!truncated_row(draws, r) || threadIdx.x != 0) return;
  const RowDrawDev d = draws[r];
  double best = -INFINITY;
  int64_t a = -1;
  int odd = 0;
  for (int k = 0; k < slices; ++k) {  // the slice pass's bests by (value, lowest id)
    const DrawPartDev& p = parts[r * slices + k];
    odd |= p.irregular;
    if (p.id >= 0 && (a < 0 || p.score > best || (p.score == best && p.id < a))) {
      best = p.score;
      a = p.id;
    }
  }
  TruncState st{};
  st.a = a;
  st.status = odd || a < 0 || best == -INFINITY ? kIrregular : kGoing;
  st.x_top = best / d.temperature;
  st.k_on = d.top_k > 0;
  st.k_rem = static_cast<uint64_t>(d.top_k > 0 ? d.top_k : 0);
  st.p_on = d.top_p < 1.0;
  st.hi_on = 1;
  states[r] = st;
  if (st.status == kIrregular) picks[r].irregular = 1;
}

__global__ void __launch_bounds__(kThreads) count_hist_kernel(const float* logits, int64_t V, const RowDrawDev* draws,
                                                              const uint64_t* masks,
                                                              const TruncState* states, unsigned long long* hist,
                                                              int level) {
  __shared__ unsigned long long sh[256];
  const int64_t r = blockIdx.y;
  if (!truncated_row(draws, r)) return;
  const TruncState st = states[r];
  if (st.status != kGoing || !st.k_on) return;
  sh[threadIdx.x] = 0;
  __syncthreads();
  const uint64_t* mask = mask_of(draws[r], masks);
  const float* row = logits + r * V;
  const int64_t begin = blockIdx.x * kSlice, end = begin + kSlice < V ? begin + kSlice : V;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const uint32_t key = order_key(logit_at(row, mask, i));
    if (level > 0 && (key >> (32 - 8 * level)) != st.k_prefix) continue;
    atomicAdd(&sh[(key >> (24 - 8 * level)) & 255u], 1ull);
  }
  __syncthreads();
  if (sh[threadIdx.x] != 0) atomicAdd(&hist[(r * kHists + kHistCount + level) * 256 + threadIdx.x], sh[threadIdx.x]);
}

__global__ void __launch_bounds__(kThreads) count_settle_kernel(const RowDrawDev* draws, TruncState* states,
                                                                const unsigned long long* hist, int level) {
  __shared__ unsigned long long sh[256];
  const int64_t r = blockIdx.x;
  if (!truncated_row(draws, r)) return;
  TruncState st = states[r];
  if (st.status != kGoing || !st.k_on) return;
  sh[threadIdx.x] = hist[(r * kHists + kHistCount + level) * 256 + threadIdx.x];
  __syncthreads();
  if (threadIdx.x != 0) return;
  uint64_t below = 0;
  const int digit = select_digit(sh, st.k_rem, &below);
  if (digit < 0) {
    st.k_on = 0;  // fewer than k' ids: no cut
  } else {
    st.k_rem -= below;
    st.k_prefix = (st.k_prefix << 8) | static_cast<uint32_t>(digit);
    if (level == kLevels - 1) {
      st.k_exact = sh[digit] == st.k_rem;
      if (!st.k_exact && st.p_on) st.status = kUncertain;  // the top-p total would need the tie's split
    }
  }
  states[r] = st;
}

__global__ void __launch_bounds__(kThreads) mass_hist_kernel(const float* logits, int64_t V, const RowDrawDev* draws,
                                                             const uint64_t* masks,
                                                             const TruncState* states, unsigned long long* hist,
                                                             int level) {
  __shared__ unsigned long long lo[256], hi[256];
  const int64_t r = blockIdx.y;
  if (!truncated_row(draws, r)) return;
  const TruncState st = states[r];
  if (st.status != kGoing || !st.p_on) return;
  const double T = draws[r].temperature;
  lo[threadIdx.x] = 0;
  hi[threadIdx.x] = 0;
  __syncthreads();
  const uint32_t pk = st.k_on ? st.k_prefix : 0u;
  const uint64_t* mask = mask_of(draws[r], masks);
  const float* row = logits + r * V;
  const int64_t begin = blockIdx.x * kSlice, end = begin + kSlice < V ? begin + kSlice : V;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const float l = logit_at(row, mask, i);
    const uint32_t key = order_key(l);
    if (key < pk) continue;
    const bool in_lo = level == 0 || (key >> (32 - 8 * level)) == st.lo_prefix;
    const bool in_hi = st.hi_on && (level == 0 || (key >> (32 - 8 * level)) == st.hi_prefix);
    if (!in_lo && !in_hi) continue;
    const unsigned long long m = static_cast<unsigned long long>(mass_of(l, T, st.x_top) * kMassScale);
    if (m == 0) continue;
    const unsigned digit = (key >> (24 - 8 * level)) & 255u;
    if (in_lo) atomicAdd(&lo[digit], m);
    if (in_hi) atomicAdd(&hi[digit], m);
  }
  __syncthreads();
  if (lo[threadIdx.x] != 0) atomicAdd(&hist[(r * kHists + kHistLo + level) * 256 + threadIdx.x], lo[threadIdx.x]);
  if (hi[threadIdx.x] != 0) atomicAdd(&hist[(r * kHists + kHistHi + level) * 256 + threadIdx.x], hi[threadIdx.x]);
}

__global__ void __launch_bounds__(kThreads) mass_settle_kernel(const RowDrawDev* draws, TruncState* states,
                                                               const unsigned long long* hist, int level) {
  __shared__ unsigned long long lo[256], hi[256];
  const int64_t r = blockIdx.x;
  if (!truncated_row(draws, r)) return;
  TruncState st = states[r];
  if (st.status != kGoing || !st.p_on) return;
  lo[threadIdx.x] = hist[(r * kHists + kHistLo + level) * 256 + threadIdx.x];
  hi[threadIdx.x] = hist[(r * kHists + kHistHi + level) * 256 + threadIdx.x];
  __syncthreads();
  if (threadIdx.x != 0) return;
  if (level == 0) {  // the targets, from P_k's whole fixed-point mass
    uint64_t total = 0;
    for (int b = 0; b < 256; ++b) total += lo[b];
    const double need = draws[r].top_p * static_cast<double>(total);
    const uint64_t t_lo = static_cast<uint64_t>(need * (1.0 - lanes::kMassTarget));
    const uint64_t t_hi = static_cast<uint64_t>(need * (1.0 + lanes::kMassTarget));
    st.lo_rem = t_lo > 0 ? t_lo : 1;
    st.hi_rem = t_hi > 0 ? t_hi : 1;
  }
  uint64_t below = 0;
  const int d_lo = select_digit(lo, st.lo_rem, &below);
  if (d_lo < 0) {
    st.status = kUncertain;
  } else {
    st.lo_rem -= below;
    st.lo_prefix = (st.lo_prefix << 8) | static_cast<uint32_t>(d_lo);
  }
  if (st.hi_on) {
    const int d_hi = select_digit(hi, st.hi_rem, &below);
    if (d_hi < 0) {
      st.hi_on = 0;  // the masses never reach the upper target: P_hi = P_k
    } else {
      st.hi_rem -= below;
      st.hi_prefix = (st.hi_prefix << 8) | static_cast<uint32_t>(d_hi);
    }
  }
  states[r] = st;
}

// A fixed tree over the block (every thread gets the sum). sh: shared [kThreads].
__device__ inline double block_sum(double mine, double* sh) {
  sh[threadIdx.x] = mine;
  __syncthreads();
  for (int o = kThreads / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
    __syncthreads();
  }
  const double s = sh[0];
  __syncthreads();
  return s;
}

__global__ void __launch_bounds__(kThreads) truncated_best_kernel(const float* logits, int64_t V,
                                                                  const RowDrawDev* draws, const uint64_t* masks,
                                                                  const TruncState* states,
                                                                  TruncPart* parts, int slices) {
  __shared__ Best sh[kThreads];
  __shared__ double sums[kThreads];
  const int64_t r = blockIdx.y;
  if (!truncated_row(draws, r)) return;
  const TruncState st = states[r];
  if (st.status != kGoing) return;
  const RowDrawDev d = draws[r];
  const CutKeys keys = cut_keys(st);
  const double floor = st.x_top + d.log_min_p;
  const uint64_t* mask = mask_of(d, masks);
  const float* row = logits + r * V;
  const int64_t begin = blockIdx.x * kSlice, end = begin + kSlice < V ? begin + kSlice : V;
  Best mine{-INFINITY, 0.0, -1};
  double total = 0.0, m_lo = 0.0, m_hi = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const float l = logit_at(row, mask, i);
    const uint32_t key = order_key(l);
    if (st.p_on && key >= keys.pk) {
      const double e = mass_of(l, d.temperature, st.x_top);
      total += e;
      if (key >= keys.lo) m_lo += e;
      if (key >= keys.hi) m_hi += e;
    }
    const double x0 = static_cast<double>(l) / d.temperature;
    if (x0 == -INFINITY || (i != st.a && (key < keys.lo || x0 < floor))) continue;  // not in S
    Best c{0.0, 0.0, i};
    c.score = device_score(l, d.temperature, d.key, i, &c.x);
    if (before(c, mine)) mine = c;
  }
  const Best b = block_best(mine, sh);
  total = block_sum(total, sums);
  m_lo = block_sum(m_lo, sums);
  m_hi = block_sum(m_hi, sums);
  if (threadIdx.x == 0) parts[r * slices + blockIdx.x] = TruncPart{b.score, b.x, b.id, total, m_lo, m_hi};
}

__global__ void __launch_bounds__(kThreads) truncated_candidates_kernel(const float* logits, int64_t V,
                                                                        const RowDrawDev* draws, const uint64_t* masks,
                                                                        const TruncState* states,
                                                                        const TruncPart* parts, RowPickDev* picks,
                                                                        int slices) {
  __shared__ Best row_best;
  __shared__ int certified;
  const int64_t r = blockIdx.y;
  if (!truncated_row(draws, r)) return;
  const TruncState st = states[r];
  if (st.status != kGoing) {
    if (st.status == kUncertain && blockIdx.x == 0 && threadIdx.x == 0) picks[r].uncertain = 1;
    return;
  }
  const RowDrawDev d = draws[r];
  if (threadIdx.x == 0) {
    Best b{-INFINITY, 0.0, -1};
    double total = 0.0, m_lo = 0.0, m_hi = 0.0;
    for (int k = 0; k < slices; ++k) {  // in slice order: the same sums in every block and every launch
      const TruncPart& p = parts[r * slices + k];
      const Best c{p.score, p.x, p.id};
      if (before(c, b)) b = c;
      total += p.total;
      m_lo += p.m_lo;
      m_hi += p.m_hi;
    }
    row_best = b;
    certified = !st.p_on || lanes::mass_cut_certified(m_lo, m_hi, d.top_p * total);
    if (!certified && blockIdx.x == 0) picks[r].uncertain = 1;
  }
  __syncthreads();
  if (!certified) return;
  // The rule over P_hi above the floor; as in row_draws.cu, an id whose u is not 1 and whose score cannot reach the
  // rule by kGumbelTermBound needs no logarithm.
  const CutKeys keys = cut_keys(st);
  const double floor = st.x_top + d.log_min_p;
  const double right = row_best.score - lanes::gumbel_slack(row_best.x);
  const uint64_t* mask = mask_of(d, masks);
  const float* row = logits + r * V;
  const int64_t begin = blockIdx.x * kSlice, end = begin + kSlice < V ? begin + kSlice : V;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const float l = logit_at(row, mask, i);
    const uint32_t key = order_key(l);
    if (key < keys.hi) continue;
    const double x0 = static_cast<double>(l) / d.temperature;
    if (x0 < floor || x0 == -INFINITY) continue;
    const uint64_t bits = lanes::token_key(d.key, static_cast<lanes::TokenId>(i));
    if (!lanes::key_uniform_is_one(bits) && (x0 + lanes::kGumbelTermBound) + lanes::gumbel_slack(x0) < right) continue;
    double x = 0.0;
    const double score = device_score(l, d.temperature, d.key, i, &x);
    if (score + lanes::gumbel_slack(x) < right) continue;
    if (i != st.a && key < keys.lo) {  // between the cut's brackets: the host's cut is not known there
      atomicExch(&picks[r].uncertain, 1);
      continue;
    }
    const int slot = atomicAdd(&picks[r].count, 1);
    if (slot < kDrawCandidates) {
      picks[r].ids[slot] = static_cast<int32_t>(i);
      picks[r].logits[slot] = l;
    }
  }
}

size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

size_t truncated_draw_scratch_bytes(int64_t n, int64_t V) {
  const size_t rows = static_cast<size_t>(n > 0 ? n : 0);
  return aligned(rows * sizeof(TruncState)) + aligned(rows * kHists * 256 * sizeof(unsigned long long)) +
         aligned(rows * static_cast<size_t>(row_draw_slices(V)) * sizeof(TruncPart));
}

cudaError_t truncated_draws(const float* logits, int64_t n, int64_t V, const RowDrawDev* draws, const uint64_t* masks,
                            const DrawPartDev* parts, void* scratch, RowPickDev* picks, cudaStream_t s) {
  if (n <= 0 || V <= 0) return cudaSuccess;
  if (n > 65535) return cudaErrorInvalidValue;
  const size_t rows = static_cast<size_t>(n);
  char* at = static_cast<char*>(scratch);
  auto* states = reinterpret_cast<TruncState*>(at);
  at += aligned(rows * sizeof(TruncState));
  auto* hist = reinterpret_cast<unsigned long long*>(at);
  const size_t hist_bytes = rows * kHists * 256 * sizeof(unsigned long long);
  at += aligned(hist_bytes);
  auto* tparts = reinterpret_cast<TruncPart*>(at);
  const int slices = static_cast<int>(row_draw_slices(V));
  const dim3 grid(static_cast<unsigned>(slices), static_cast<unsigned>(n));
  cudaError_t e = cudaMemsetAsync(hist, 0, hist_bytes, s);
  if (e != cudaSuccess) return e;
  settle_top_kernel<<<static_cast<unsigned>(n), 32, 0, s>>>(draws, parts, slices, states, picks);
  for (int level = 0; level < kLevels; ++level) {
    count_hist_kernel<<<grid, kThreads, 0, s>>>(logits, V, draws, masks, states, hist, level);
    count_settle_kernel<<<static_cast<unsigned>(n), kThreads, 0, s>>>(draws, states, hist, level);
  }
  for (int level = 0; level < kLevels; ++level) {
    mass_hist_kernel<<<grid, kThreads, 0, s>>>(logits, V, draws, masks, states, hist, level);
    mass_settle_kernel<<<static_cast<unsigned>(n), kThreads, 0, s>>>(draws, states, hist, level);
  }
  truncated_best_kernel<<<grid, kThreads, 0, s>>>(logits, V, draws, masks, states, tparts, slices);
  truncated_candidates_kernel<<<grid, kThreads, 0, s>>>(logits, V, draws, masks, states, tparts, picks, slices);
  return cudaGetLastError();
}

}  // namespace dsv4::cuda
