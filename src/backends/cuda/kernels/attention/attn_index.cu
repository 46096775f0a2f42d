// The lightning indexer's device side (model-spec.md §3.6): bf16 index scores against packed
// FP4 index keys, layer-20-style candidate blocks, and deterministic top-k (ties to the lower row)
// by two-pass radix selects on the scores' 16-bit bf16 keys (two levels for long rows).
#include <cub/block/block_scan.cuh>

#include "backends/cuda/kernels/attention/attention_kernels.cuh"
#include "backends/cuda/kernels/attention/attn_device.cuh"

namespace dsv4::cuda {

namespace {

using namespace attn;

// Index scores per (row, t): the heads' terms bf16(relu(bf16(qi_h . k_t)) * w_h) (the oracle's dot:
// 8 interleaved fp32 partial sums combined pairwise) added in head order, s += term_h, as the
// oracle does; for few rows four threads per t compute a quarter of the terms each, the first adds.
// Both operands are FP4 with power-of-two group scales: qi_h = n * 2^Eq and k_t = m * 2^Ek per
// 32-element group g (n, m small integers; a group of qi that is not of that form sends the head
// to the float path). Every product is then exactly n*m * 2^(Eq+Ek), and while the group exponents
// E_g = Eq_g + Ek_g of the nonzero groups span at most 9 binades (inside [-149, 100]) every partial
// sum of the oracle's order is exact too (|sum| < 23040 * 2^Emax < 2^24 * 2^Emin), so the oracle's
// dot equals the exact sum_g D_g * 2^E_g with D_g the group's integer dot (dp4a). Otherwise the
// (key, head) takes the float path in the oracle's order.
constexpr int kScoreThreads = 256;
constexpr int kScoreKeys = kScoreThreads / 4;  // key rows per block (a quarter of the heads per thread)
constexpr int kExcluded = 100000;   // exponent sentinel: an all-zero group of qi (contributes 0)
constexpr int kNotFp4 = -100000;    // exponent sentinel: a group of qi not of the integer form

__device__ __forceinline__ float pow2_exact(int e) {  // 2^e for -149 <= e <= 127
  return e >= -126 ? __int_as_float((e + 127) << 23) : __int_as_float(1 << (e + 149));
}

// Four FP4 codes (16 bits, element order) -> four int8 of 2*e2m1 in {0, +-1, +-2, +-3, +-4, +-6, +-8, +-12}.
__device__ __forceinline__ uint32_t e2m1x4_to_i8x4(uint32_t c16) {
  const uint32_t mag = __byte_perm(0x03020100u, 0x0c080604u, c16 & 0x7777u);
  const uint32_t neg = __byte_perm(0u, 0xffffffffu, ((c16 >> 3) & 0x1111u) << 2);
  return __vsub4(mag ^ neg, neg);
}

template <int IHD>
__device__ __forceinline__ float index_terms(const uint8_t* row, const float* q, const float* w, const uint32_t* qw,
                                             const int* qe, int64_t h_begin, int64_t h_end, float* out);

template <int IHD>
__global__ void __launch_bounds__(kScoreThreads)
index_scores_kernel(const float* qi, const float* wt, float wscale, const PieceDev* pieces, const int32_t* row_piece,
                    const int64_t* pos, int64_t IH, int ratio, float* score, int64_t stride, int split) {
  constexpr int G = IHD / 32, W = IHD / 4;  // groups, int8x4 words per head
  extern __shared__ __align__(16) float sh[];
  float* q = sh;                                                   // [IH, IHD] floats
  float* w = q + IH * IHD;                                         // [IH]
  uint32_t* qw = reinterpret_cast<uint32_t*>(w + ((IH + 3) & ~int64_t{3}));  // [IH, W] int8x4, 16 B aligned
  int* qe = reinterpret_cast<int*>(qw + IH * W);                   // [IH, G] exponents / sentinels
  const int64_t r = blockIdx.y;
  for (int64_t i0 = threadIdx.x; i0 < IH * IHD; i0 += 8 * kScoreThreads) {  // 8 loads in flight
    float t[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) t[u] = i0 + u * kScoreThreads < IH * IHD ? __ldg(qi + r * IH * IHD + i0 + u * kScoreThreads) : 0.0f;
#pragma unroll
    for (int u = 0; u < 8; ++u)
      if (i0 + u * kScoreThreads < IH * IHD) q[i0 + u * kScoreThreads] = t[u];
  }
  for (int64_t h = threadIdx.x; h < IH; h += blockDim.x) w[h] = rb(__fmul_rn(wt[r * IH + h], wscale));
  __syncthreads();
  // Integer form of every 32-element group of qi, one thread per group: n_i = x_i / 2^e with
  // |x| / 2^e < 16; the group qualifies when every n_i is an integer and n_i * 2^e gives x_i back
  // (no underflow on the way).
  for (int64_t task = threadIdx.x; task < IH * G; task += blockDim.x) {
    const float* x = q + task * 32;
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(x[i]));
    const int ex = static_cast<int>((__float_as_uint(amax) >> 23) & 255u) - 127;
    const int e = ex - 3;
    bool ok = amax == 0.0f || (ex > -127 && ex < 128);
    uint32_t words[8] = {};
    if (ok && amax != 0.0f) {
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        const float n = ldexpf(x[i], -e);
        ok = ok && n == rintf(n) && ldexpf(n, e) == x[i];
        words[i >> 2] |= (static_cast<uint32_t>(static_cast<int>(n)) & 255u) << (8 * (i & 3));
      }
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) qw[task * 8 + j] = words[j];
    qe[task] = !ok ? kNotFp4 : amax == 0.0f ? kExcluded : e;
  }
  __syncthreads();
  const int64_t lc = (pos[r] + 1) / ratio;
  const uint8_t* keys = pieces[row_piece[r]].ikeys;
  if (split == 1) {  // one thread per key row, every head
    const int64_t t = static_cast<int64_t>(blockIdx.x) * kScoreThreads + threadIdx.x;
    if (t < lc) score[r * stride + t] = rb(index_terms<IHD>(keys + t * (IHD / 2 + IHD / 32), q, w, qw, qe, 0, IH, nullptr));
    return;
  }
  // Four threads per key row, a quarter of the heads each; the terms summed in head order after.
  const int tl = threadIdx.x % kScoreKeys, hq = threadIdx.x / kScoreKeys;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kScoreKeys + tl;
  const int64_t hpq = (IH + 3) / 4, h_begin = hq * hpq, h_end = h_begin + hpq < IH ? h_begin + hpq : IH;
  float* terms = reinterpret_cast<float*>(qe + IH * G);  // [kScoreKeys][IH + 1]
  if (t < lc) (void)index_terms<IHD>(keys + t * (IHD / 2 + IHD / 32), q, w, qw, qe, h_begin, h_end, terms + tl * (IH + 1));
  __syncthreads();
  if (hq != 0 || t >= lc) return;
  float s = 0.0f;
  for (int64_t h = 0; h < IH; ++h) s = __fadd_rn(s, terms[tl * (IH + 1) + h]);
  score[r * stride + t] = rb(s);
}

// The terms bf16(relu(bf16(qi_h . k)) * w_h) of heads [h_begin, h_end) for one key row (to out[h]
// unless out is null); returns their sum in head order from 0.
template <int IHD>
__device__ __forceinline__ float index_terms(const uint8_t* row, const float* q, const float* w, const uint32_t* qw,
                                            const int* qe, int64_t h_begin, int64_t h_end, float* out) {
  constexpr int G = IHD / 32, W = IHD / 4;
  uint32_t kw[W];
  int ek[G];
#pragma unroll
  for (int i = 0; i < IHD / 8; ++i) {
    uint32_t c;
    if constexpr (IHD == 128) {
      c = reinterpret_cast<const uint32_t*>(row)[i];  // 68 B rows: 4-byte aligned
    } else {
      c = row[4 * i] | (uint32_t{row[4 * i + 1]} << 8) | (uint32_t{row[4 * i + 2]} << 16) | (uint32_t{row[4 * i + 3]} << 24);
    }
    kw[2 * i] = e2m1x4_to_i8x4(c & 0xffffu);
    kw[2 * i + 1] = e2m1x4_to_i8x4(c >> 16);
  }
#pragma unroll
  for (int g = 0; g < G; ++g) ek[g] = static_cast<int>(row[IHD / 2 + g]) - 128;  // ue8m0 byte b: 2^(b-127) = 2 * 2^(b-128)
  float s = 0.0f;
  for (int64_t h = h_begin; h < h_end; ++h) {
    int emin = 1 << 20, emax = -(1 << 20);
    bool fp4 = true;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int e = qe[h * G + g];
      fp4 = fp4 && e != kNotFp4;
      if (e == kExcluded) continue;
      emin = min(emin, e + ek[g]);
      emax = max(emax, e + ek[g]);
    }
    float dot;
    if (fp4 && (emax < emin || (emax - emin <= 9 && emin >= -149 && emax <= 100))) {
      dot = 0.0f;
      const uint4* qh = reinterpret_cast<const uint4*>(qw + h * W);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const uint4 a = qh[2 * g], b = qh[2 * g + 1];
        int acc = 0;
        acc = __dp4a(static_cast<int>(kw[8 * g + 0]), static_cast<int>(a.x), acc);
        acc = __dp4a(static_cast<int>(kw[8 * g + 1]), static_cast<int>(a.y), acc);
        acc = __dp4a(static_cast<int>(kw[8 * g + 2]), static_cast<int>(a.z), acc);
        acc = __dp4a(static_cast<int>(kw[8 * g + 3]), static_cast<int>(a.w), acc);
        acc = __dp4a(static_cast<int>(kw[8 * g + 4]), static_cast<int>(b.x), acc);
        acc = __dp4a(static_cast<int>(kw[8 * g + 5]), static_cast<int>(b.y), acc);
        acc = __dp4a(static_cast<int>(kw[8 * g + 6]), static_cast<int>(b.z), acc);
        acc = __dp4a(static_cast<int>(kw[8 * g + 7]), static_cast<int>(b.w), acc);
        const int e = qe[h * G + g];
        if (e != kExcluded) dot = __fadd_rn(dot, __fmul_rn(static_cast<float>(acc), pow2_exact(e + ek[g])));
      }
    } else {
      const float* qh = q + h * IHD;
      float l[8] = {};
      for (int i = 0; i < IHD; ++i) l[i & 7] = __fadd_rn(l[i & 7], __fmul_rn(qh[i], fp4ue8m0_row_at(row, IHD, i)));
      dot = __fadd_rn(__fadd_rn(__fadd_rn(l[0], l[1]), __fadd_rn(l[2], l[3])),
                      __fadd_rn(__fadd_rn(l[4], l[5]), __fadd_rn(l[6], l[7])));
    }
    float v = rb(dot);
    v = v < 0.0f ? 0.0f : v;
    const float term = rb(__fmul_rn(v, w[h]));
    if (out) out[h] = term;
    s = __fadd_rn(s, term);
  }
  return s;
}

// Order-preserving 16-bit key of a bf16-valued float (+-0 the same key, -inf lowest, +inf highest).
__device__ __forceinline__ uint32_t key16(float v) {
  if (v == 0.0f) return 0x8000u;
  const uint32_t b = __float_as_uint(v) >> 16;
  return (b & 0x8000u) ? (~b & 0xffffu) : (b | 0x8000u);
}

// Adds one to hist[bin] for every lane with bin >= 0, one shared atomic per distinct bin of the warp
// (scores share few high bytes, so plain per-lane atomics would serialize).
__device__ __forceinline__ void warp_hist_add(int* hist, int bin) {
  const unsigned same = __match_any_sync(0xffffffffu, bin);
  if (bin >= 0 && (threadIdx.x & 31) == __ffs(same) - 1) atomicAdd(&hist[bin], __popc(same));
}

template <int NT, int EPT>
struct SelectShared {
  alignas(16) uint16_t keys[NT * EPT];  // one tile's keys, staged in index order
  int hist[256];
  uint32_t thr;
  int above;
  typename cub::BlockScan<long long, NT>::TempStorage scan;
};

// The k largest of key(0..n-1) (16-bit keys; ties to the lower index), by a block of NT threads
// over tiles of NT*EPT elements, thread t owning elements [tile + t*EPT, +EPT). Two histogram
// passes (high byte, then low byte under the chosen high byte) find the k-th largest key `thr`
// and the count `above` of larger keys; then one block scan of (greater, equal) counts per tile
// gives every selected element its output slot in index order: slot = greater before it +
// min(equal before it, k - above). out(i, selected, slot, key) is called once for every element
// (key 0xffff when everything is selected). key(i) is called by whole warps, consecutive lanes on
// consecutive i, also for i >= n (its value is then ignored); with a single tile the keys stay in
// registers between the passes.
template <int NT, int EPT, class KeyFn, class OutFn>
__device__ void tile_select(int n, int k, KeyFn key, OutFn out, SelectShared<NT, EPT>& sh) {
  static_assert(EPT % 8 == 0, "whole 16-byte key groups per thread");
  constexpr int kTile = NT * EPT;
  const int ntiles = (n + kTile - 1) / kTile;
  if (k >= n || k <= 0) {  // everything or nothing
    for (int i = threadIdx.x; i < n; i += NT) out(i, k > 0, i, 0xffffu);
    return;
  }
  uint32_t kv[EPT];
  const int own = static_cast<int>(threadIdx.x) * EPT;
  // A tile's keys: computed with consecutive threads on consecutive elements (coalesced reads),
  // then each thread takes its own EPT from shared memory.
  auto load = [&](int tile) {
    uint32_t t[EPT];  // all of the thread's reads in flight before the shared stores
#pragma unroll
    for (int u = 0; u < EPT; ++u) t[u] = key(tile * kTile + u * NT + static_cast<int>(threadIdx.x));  // whole warps
#pragma unroll
    for (int u = 0; u < EPT; ++u) {
      const int m = u * NT + static_cast<int>(threadIdx.x);
      sh.keys[m] = static_cast<uint16_t>(tile * kTile + m < n ? t[u] : 0u);
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < EPT; j += 8) {
      const uint4 v = *reinterpret_cast<const uint4*>(sh.keys + own + j);
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int u = 0; u < 8 && j + u < EPT; ++u) kv[j + u] = (w[u >> 1] >> (16 * (u & 1))) & 0xffffu;
    }
    __syncthreads();
  };
  if (ntiles == 1) load(0);
  uint32_t prefix = 0;
  int above = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = threadIdx.x; i < 256; i += NT) sh.hist[i] = 0;
    __syncthreads();
    for (int tile = 0; tile < ntiles; ++tile) {
      if (ntiles > 1) load(tile);
#pragma unroll
      for (int j = 0; j < EPT; ++j) {
        int bin = -1;
        if (tile * kTile + own + j < n) {
          if (pass == 0) bin = static_cast<int>(kv[j] >> 8);
          else if ((kv[j] >> 8) == prefix) bin = static_cast<int>(kv[j] & 255u);
        }
        warp_hist_add(sh.hist, bin);
      }
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      // Lane l holds bins 8l..8l+7; suffix sums over lanes find the bin holding the k-th largest.
      const int lane = threadIdx.x;
      int c = 0;
#pragma unroll
      for (int b = 0; b < 8; ++b) c += sh.hist[8 * lane + b];
      int suf = c;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_down_sync(0xffffffffu, suf, o);
        if (lane + o < 32) suf += v;
      }
      const unsigned enough = __ballot_sync(0xffffffffu, above + suf >= k);
      if (lane == 31 - __clz(enough)) {
        int cum = above + suf - c;
        int b = 8 * lane + 7;
        for (; b > 8 * lane; --b) {
          if (cum + sh.hist[b] >= k) break;
          cum += sh.hist[b];
        }
        sh.thr = pass == 0 ? static_cast<uint32_t>(b) : ((prefix << 8) | static_cast<uint32_t>(b));
        sh.above = cum;
      }
    }
    __syncthreads();
    prefix = sh.thr;
    above = sh.above;
    __syncthreads();
  }
  const uint32_t thr = prefix;
  const int need_eq = k - above;
  long long carry = 0;  // (greater << 32) | equal, over the previous tiles
  for (int tile = 0; tile < ntiles; ++tile) {
    if (ntiles > 1) load(tile);
    int gt = 0, eq = 0;
#pragma unroll
    for (int j = 0; j < EPT; ++j) {
      if (tile * kTile + own + j < n) {
        gt += kv[j] > thr;
        eq += kv[j] == thr;
      }
    }
    long long before, total;
    cub::BlockScan<long long, NT>(sh.scan).ExclusiveSum((static_cast<long long>(gt) << 32) | eq, before, total);
    before += carry;
    carry += total;
    int eq_rank = static_cast<int>(before & 0xffffffffll);
    int slot = static_cast<int>(before >> 32) + (eq_rank < need_eq ? eq_rank : need_eq);
#pragma unroll
    for (int j = 0; j < EPT; ++j) {
      const int i = tile * kTile + own + j;
      if (i >= n) continue;
      bool sel = kv[j] > thr;
      if (kv[j] == thr) sel = eq_rank++ < need_eq;
      out(i, sel, slot, kv[j]);
      slot += sel;
    }
    __syncthreads();  // scan storage reuse
  }
}

// Key of score t of a row, -inf where a candidate mask excludes it.
__device__ __forceinline__ uint32_t masked_key(const float* sc, const uint8_t* mask, int64_t t) {
  return mask && !mask[t] ? key16(__int_as_float(0xff800000)) : key16(sc[t]);
}

// Top-k in two levels for long rows: the first level keeps each chunk's own top k (every element
// of the row's top k is in its chunk's top k under the same order), written in index order at
// work[r, c*K ...]; the second selects the row's top k from that index-ordered list.
constexpr int kChunkThreads = 512, kChunkEpt = 16;    // first level: 8192-element tiles
constexpr int kRowThreads = 512, kRowEpt = 16;        // second level / direct: 8192-element tiles
constexpr int kShortEpt = 8;                          // rows of at most 4096 scores: one 4096-element tile
constexpr int kCandEpt = 24;                          // candidate blocks: 12288-element tiles
constexpr int64_t kDirectMax = int64_t{kRowThreads} * kRowEpt;
constexpr int64_t kMaxChunks = 16;                    // kMaxChunks * K <= kDirectMax for K <= 512

// Chunk length of a row of lc scores (a multiple of the first level's tile, >= K, <= kMaxChunks chunks).
__host__ __device__ __forceinline__ int64_t topk_chunk(int64_t lc, int64_t K) {
  constexpr int64_t tile = int64_t{kChunkThreads} * kChunkEpt;
  int64_t ch = tile * ((lc + kMaxChunks * tile - 1) / (kMaxChunks * tile));
  const int64_t kmin = (K + tile - 1) / tile * tile;
  return ch > kmin ? ch : kmin;
}

__global__ void __launch_bounds__(kChunkThreads)
topk_chunks_kernel(const float* score, int64_t stride, const int64_t* pos, int ratio, const uint8_t* mask,
                   int64_t mask_stride, const int32_t* mask_row, int64_t K, int32_t* work) {
  __shared__ SelectShared<kChunkThreads, kChunkEpt> sh;
  const int64_t r = blockIdx.y, c = blockIdx.x;
  const int64_t lc = (pos[r] + 1) / ratio;
  if (lc <= kDirectMax) return;
  const int64_t ch = topk_chunk(lc, K), t0 = c * ch;
  if (t0 >= lc) return;
  const int64_t n = lc - t0 < ch ? lc - t0 : ch;
  const float* sc = score + r * stride;
  const uint8_t* mr = mask ? mask + (mask_row ? mask_row[r] : r) * mask_stride : nullptr;
  int32_t* out = work + (r * kMaxChunks + c) * K;
  tile_select<kChunkThreads, kChunkEpt>(
      static_cast<int>(n), static_cast<int>(n < K ? n : K),
      [&](int i) { return i < n ? masked_key(sc, mr, t0 + i) : 0u; },
      [&](int64_t i, bool sel, int slot, uint32_t) { if (sel) out[slot] = static_cast<int32_t>(t0 + i); }, sh);
}

// EPT: kRowEpt, or kShortEpt when every row fits one short tile (fewer serial histogram steps per
// thread; the selection is exact either way).
template <int EPT>
__global__ void __launch_bounds__(kRowThreads)
topk_rows_kernel(const float* score, int64_t stride, const int64_t* pos, int ratio, const uint8_t* mask,
                 int64_t mask_stride, const int32_t* mask_row, int64_t K, int32_t* topk, const int32_t* work) {
  __shared__ SelectShared<kRowThreads, EPT> sh;
  const int64_t r = blockIdx.x;
  const int64_t lc = (pos[r] + 1) / ratio;
  const int64_t k = lc < K ? lc : K;
  const float* sc = score + r * stride;
  const uint8_t* mr = mask ? mask + (mask_row ? mask_row[r] : r) * mask_stride : nullptr;
  int32_t* out = topk + r * K;
  if (lc <= kDirectMax) {
    tile_select<kRowThreads, EPT>(
        static_cast<int>(lc), static_cast<int>(k), [&](int i) { return i < lc ? masked_key(sc, mr, i) : 0u; },
        [&](int64_t i, bool sel, int slot, uint32_t) { if (sel) out[slot] = static_cast<int32_t>(i); }, sh);
  } else {
    const int64_t ch = topk_chunk(lc, K), nc = (lc + ch - 1) / ch;
    const int64_t n = (nc - 1) * K + (lc - (nc - 1) * ch < K ? lc - (nc - 1) * ch : K);
    const int32_t* cand = work + r * kMaxChunks * K;
    tile_select<kRowThreads, EPT>(
        static_cast<int>(n), static_cast<int>(k), [&](int i) { return i < n ? masked_key(sc, mr, cand[i]) : 0u; },
        [&](int64_t i, bool sel, int slot, uint32_t) { if (sel) out[slot] = cand[i]; }, sh);
  }
  for (int64_t i = k + threadIdx.x; i < K; i += blockDim.x) out[i] = -1;
}

// Block keys of the candidate source, one thread per block of B scores: key16 of the block's max
// (max is exact in any order), the block of row lc-1 forced to +inf. keys [rows, key_stride].
__global__ void candidate_keys_kernel(const float* score, int64_t stride, const int64_t* pos, int ratio, int64_t B,
                                      uint16_t* keys, int64_t key_stride) {
  const int64_t r = blockIdx.y;
  const int64_t lc = (pos[r] + 1) / ratio;
  const int64_t nb = (lc + B - 1) / B;
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= nb) return;
  const float* sc = score + r * stride + b * B;
  const int64_t len = lc - b * B < B ? lc - b * B : B;
  float v = __int_as_float(0xff800000);
#pragma unroll 8
  for (int64_t t = 0; t < len; ++t) v = fmaxf(v, __ldg(sc + t));
  keys[r * key_stride + b] = static_cast<uint16_t>(b == nb - 1 ? key16(__int_as_float(0x7f800000)) : key16(v));
}

// Candidate blocks of one row from its block keys: the top min(topk_blocks, nb) blocks whose value
// is above -inf are kept; every row of [0, lc) gets its block's verdict (through shared memory and
// one coalesced pass when the row's blocks fit one tile).
__global__ void __launch_bounds__(kRowThreads)
candidate_rows_kernel(const uint16_t* keys, int64_t key_stride, const int64_t* pos, int ratio, int64_t topk_blocks,
                      int64_t B, uint8_t* cand, int64_t cand_stride) {
  __shared__ SelectShared<kRowThreads, kCandEpt> sh;
  __shared__ uint8_t verdict[kRowThreads * kCandEpt];
  const int64_t r = blockIdx.x;
  const int64_t lc = (pos[r] + 1) / ratio;
  const int64_t nb = (lc + B - 1) / B;
  const uint16_t* kr = keys + r * key_stride;
  uint8_t* m = cand + r * cand_stride;
  const uint32_t neg_inf_key = key16(__int_as_float(0xff800000));
  const bool staged = nb <= kRowThreads * kCandEpt;
  tile_select<kRowThreads, kCandEpt>(
      static_cast<int>(nb), static_cast<int>(nb < topk_blocks ? nb : topk_blocks),
      [&](int b) { return b < nb ? static_cast<uint32_t>(kr[b]) : 0u; },
      [&](int64_t b, bool sel, int, uint32_t key) {
        // A selected block at -inf is dropped (when everything is selected the key is read again).
        if (sel && key == 0xffffu) key = kr[b];
        const uint8_t keep = sel && key > neg_inf_key;
        if (staged) verdict[b] = keep;
        else
          for (int64_t t = b * B; t < (b + 1) * B && t < lc; ++t) m[t] = keep;
      },
      sh);
  if (!staged) return;
  __syncthreads();
  for (int64_t t = threadIdx.x; t < lc; t += kRowThreads) m[t] = verdict[t / B];
}

__global__ void apply_candidates_kernel(float* score, int64_t stride, const int64_t* pos, int ratio,
                                        const uint8_t* cand, int64_t cand_stride) {
  const int64_t r = blockIdx.y;
  const int64_t lc = (pos[r] + 1) / ratio;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < lc && !cand[r * cand_stride + t]) score[r * stride + t] = __int_as_float(0xff800000);
}

}  // namespace

cudaError_t index_scores(const float* qi, const float* wt, float wscale, const PieceDev* pieces,
                         const int32_t* row_piece, const int64_t* pos, int64_t rows, int64_t IH, int64_t ihd,
                         int ratio, float* score, int64_t stride, int64_t max_lc, cudaStream_t s) {
  if (rows == 0 || max_lc == 0) return cudaSuccess;
  // Few short rows: four threads per key row (four times the blocks on the latency path); otherwise
  // one (each block's query preparation is then shared by 256 keys).
  const int split = rows * max_lc <= 16384 ? 4 : 1;
  const int64_t per_block = kScoreThreads / split;
  const dim3 grid(static_cast<unsigned>((max_lc + per_block - 1) / per_block), static_cast<unsigned>(rows));
  const size_t shm = (IH * ihd + ((IH + 3) & ~int64_t{3})) * sizeof(float) + IH * (ihd / 4) * 4 + IH * (ihd / 32) * 4 +
                     (split > 1 ? kScoreKeys * (IH + 1) * sizeof(float) : 0);
  auto launch = [&](auto kernel) -> cudaError_t {
    if (shm > 48 * 1024) {
      const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shm));
      if (e != cudaSuccess) return e;
    }
    kernel<<<grid, kScoreThreads, shm, s>>>(qi, wt, wscale, pieces, row_piece, pos, IH, ratio, score, stride, split);
    return cudaGetLastError();
  };
  switch (ihd) {
    case 32: return launch(index_scores_kernel<32>);
    case 64: return launch(index_scores_kernel<64>);
    case 128: return launch(index_scores_kernel<128>);
    default: return cudaErrorInvalidValue;
  }
}

// Models without a candidate source (V4 / 0731) may carry block 0: they need no block keys.
int64_t candidate_work_elems(int64_t rows, int64_t max_lc, int64_t block) {
  return block > 0 ? rows * ((max_lc + block - 1) / block) : 0;
}

cudaError_t candidate_rows(float* score, int64_t stride, const int64_t* pos, int64_t rows, int ratio,
                           int64_t topk_blocks, int64_t block, uint8_t* cand, int64_t cand_stride, uint16_t* work,
                           cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  const int64_t max_nb = (stride + block - 1) / block;
  if (max_nb == 0) return cudaSuccess;
  candidate_keys_kernel<<<dim3(static_cast<unsigned>((max_nb + 255) / 256), static_cast<unsigned>(rows)), 256, 0, s>>>(
      score, stride, pos, ratio, block, work, max_nb);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  candidate_rows_kernel<<<rows, kRowThreads, 0, s>>>(work, max_nb, pos, ratio, topk_blocks, block, cand, cand_stride);
  return cudaGetLastError();
}

cudaError_t apply_candidates(float* score, int64_t stride, const int64_t* pos, int64_t rows, int ratio,
                             const uint8_t* cand, int64_t cand_stride, int64_t max_lc, cudaStream_t s) {
  if (rows == 0 || max_lc == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>((max_lc + 255) / 256), static_cast<unsigned>(rows));
  apply_candidates_kernel<<<grid, 256, 0, s>>>(score, stride, pos, ratio, cand, cand_stride);
  return cudaGetLastError();
}

int64_t topk_work_ints(int64_t rows, int64_t max_lc, int64_t k) {
  return max_lc > kDirectMax ? rows * kMaxChunks * k : 0;
}

cudaError_t topk_rows(const float* score, int64_t stride, const int64_t* pos, int64_t rows, int ratio,
                      const uint8_t* mask, int64_t mask_stride, int64_t k, int32_t* topk, int32_t* work,
                      cudaStream_t s, const int32_t* mask_row) {
  if (rows == 0) return cudaSuccess;
  if (stride > kDirectMax) {
    if (!work) return cudaErrorInvalidValue;
    topk_chunks_kernel<<<dim3(static_cast<unsigned>(kMaxChunks), static_cast<unsigned>(rows)), kChunkThreads, 0, s>>>(
        score, stride, pos, ratio, mask, mask_stride, mask_row, k, work);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  if (stride <= int64_t{kRowThreads} * kShortEpt)
    topk_rows_kernel<kShortEpt><<<rows, kRowThreads, 0, s>>>(score, stride, pos, ratio, mask, mask_stride, mask_row, k,
                                                             topk, work);
  else
    topk_rows_kernel<kRowEpt><<<rows, kRowThreads, 0, s>>>(score, stride, pos, ratio, mask, mask_stride, mask_row, k,
                                                           topk, work);
  return cudaGetLastError();
}

}  // namespace dsv4::cuda
