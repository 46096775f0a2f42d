// The lightning indexer's selection on the device (model-spec.md §3.6): layer-20-style candidate blocks and
// deterministic top-k (ties to the lower row) by two-pass radix selects on the scores' 16-bit bf16 keys (two
// levels for long rows). The scores themselves: attn_index.cu.
#include <cub/block/block_scan.cuh>

#include <cstdint>

#include "backends/cuda/kernels/attention/attention_kernels.cuh"
#include "backends/cuda/kernels/attention/attn_device.cuh"

namespace dsv4::cuda {

namespace {

using namespace attn;

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
