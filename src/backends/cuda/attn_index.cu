// The lightning indexer's device side (model-spec.md §3.6): bf16 index scores against packed
// FP4 index keys, layer-20-style candidate blocks, and deterministic top-k (ties to the lower row)
// by a two-pass radix select on the scores' 16-bit bf16 keys.
#include <cub/block/block_scan.cuh>

#include "backends/cuda/attention_kernels.cuh"
#include "backends/cuda/attn_device.cuh"

namespace dsv4::cuda {

namespace {

using namespace attn;
constexpr int kSelThreads = 512;
constexpr int64_t kMaxStaged = 96 * 1024;  // 16-bit keys staged in shared memory (192 KiB)

// One thread per (row, t): the key row decoded into registers once, then 32-ish head dots in the
// oracle's order (8 interleaved partial sums combined pairwise, no contraction), heads in order.
template <int IHD>
__global__ void index_scores_kernel(const float* qi, const float* wt, float wscale, const PieceDev* pieces,
                                    const int32_t* row_piece, const int64_t* pos, int64_t IH, int ratio,
                                    float* score, int64_t stride) {
  extern __shared__ __align__(16) float sh[];  // qi row [IH * IHD], then weights [IH]
  const int64_t r = blockIdx.y;
  float* q = sh;
  float* w = sh + IH * IHD;
  for (int64_t i = threadIdx.x; i < IH * IHD; i += blockDim.x) q[i] = qi[r * IH * IHD + i];
  for (int64_t h = threadIdx.x; h < IH; h += blockDim.x) w[h] = rb(__fmul_rn(wt[r * IH + h], wscale));
  __syncthreads();
  const int64_t lc = (pos[r] + 1) / ratio;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= lc) return;
  const uint8_t* row = pieces[row_piece[r]].ikeys + t * (IHD / 2 + IHD / 32);
  float k[IHD];
#pragma unroll
  for (int i = 0; i < IHD; ++i) k[i] = fp4ue8m0_row_at(row, IHD, i);
  float s = 0.0f;
  for (int64_t h = 0; h < IH; ++h) {
    const float4* qh = reinterpret_cast<const float4*>(q + h * IHD);
    float l[8] = {};
#pragma unroll
    for (int i = 0; i < IHD; i += 8) {
      const float4 a = qh[i / 4], b = qh[i / 4 + 1];
      const float qv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
      for (int j = 0; j < 8; ++j) l[j] = __fadd_rn(l[j], __fmul_rn(qv[j], k[i + j]));
    }
    const float dot = __fadd_rn(__fadd_rn(__fadd_rn(l[0], l[1]), __fadd_rn(l[2], l[3])),
                                __fadd_rn(__fadd_rn(l[4], l[5]), __fadd_rn(l[6], l[7])));
    float v = rb(dot);
    v = v < 0.0f ? 0.0f : v;
    s = __fadd_rn(s, rb(__fmul_rn(v, w[h])));
  }
  score[r * stride + t] = rb(s);
}

// Order-preserving 16-bit key of a bf16-valued float (+-0 the same key, -inf lowest, +inf highest).
__device__ __forceinline__ uint32_t key16(float v) {
  if (v == 0.0f) return 0x8000u;
  const uint32_t b = __float_as_uint(v) >> 16;
  return (b & 0x8000u) ? (~b & 0xffffu) : (b | 0x8000u);
}

using Scan = cub::BlockScan<int, kSelThreads>;

// Adds one to hist[bin] for every lane with bin >= 0, one shared atomic per distinct bin of the warp
// (scores share few high bytes, so plain per-lane atomics would serialize).
__device__ __forceinline__ void warp_hist_add(int* hist, int bin) {
  const unsigned same = __match_any_sync(0xffffffffu, bin);
  if (bin >= 0 && (threadIdx.x & 31) == __ffs(same) - 1) atomicAdd(&hist[bin], __popc(same));
}

// The k largest of key(0..n-1) (ties to the lower index), reported in ascending index order as
// emit(index, output slot). Every thread of the block calls it. Two histogram passes find the k-th
// largest key; then each thread scans its contiguous segment: counts, one block scan for the rank
// among equal keys, one for the output slots.
template <class KeyFn, class EmitFn>
__device__ void block_select(int64_t n, int64_t k, KeyFn key, EmitFn emit) {
  __shared__ int hist[256];
  __shared__ uint32_t s_thr;
  __shared__ int s_gt;
  __shared__ typename Scan::TempStorage scan_tmp;
  if (k <= 0) return;
  const int64_t n_pad = (n + blockDim.x - 1) / blockDim.x * blockDim.x;
  uint32_t prefix = 0;
  int above = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
    __syncthreads();
    for (int64_t t = threadIdx.x; t < n_pad; t += blockDim.x) {
      int bin = -1;
      if (t < n) {
        const uint32_t kv = key(t);
        if (pass == 0) bin = static_cast<int>(kv >> 8);
        else if ((kv >> 8) == prefix) bin = static_cast<int>(kv & 255);
      }
      warp_hist_add(hist, bin);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int cum = above;
      int b = 255;
      for (; b > 0; --b) {
        if (cum + hist[b] >= k) break;
        cum += hist[b];
      }
      s_thr = pass == 0 ? static_cast<uint32_t>(b) : ((prefix << 8) | static_cast<uint32_t>(b));
      s_gt = cum;
    }
    __syncthreads();
    prefix = s_thr;
    above = s_gt;
    __syncthreads();
  }
  const uint32_t thr = prefix;
  const int need_eq = static_cast<int>(k) - above;
  const int64_t seg = n_pad / blockDim.x;
  const int64_t t0 = threadIdx.x * seg, t1 = t0 + seg < n ? t0 + seg : n;
  int n_eq = 0;
  for (int64_t t = t0; t < t1; ++t) n_eq += key(t) == thr;
  int eq_rank;
  Scan(scan_tmp).ExclusiveSum(n_eq, eq_rank);
  __syncthreads();
  int n_sel = 0;
  for (int64_t t = t0, e = eq_rank; t < t1; ++t) {
    const uint32_t kv = key(t);
    if (kv > thr) ++n_sel;
    else if (kv == thr) n_sel += (e++ < need_eq);
  }
  int slot;
  Scan(scan_tmp).ExclusiveSum(n_sel, slot);
  __syncthreads();
  for (int64_t t = t0, e = eq_rank; t < t1; ++t) {
    const uint32_t kv = key(t);
    bool sel = kv > thr;
    if (kv == thr) sel = e++ < need_eq;
    if (sel) emit(t, slot++);
  }
}

// Scores are staged as 16-bit keys in shared memory when the row fits (`staged` keys), so the
// select's passes read shared memory; longer rows read the scores from global memory.
__global__ void topk_rows_kernel(const float* score, int64_t stride, const int64_t* pos, int ratio, int64_t K,
                                 int32_t* topk, int64_t staged) {
  extern __shared__ uint16_t keys[];
  const int64_t r = blockIdx.x;
  const int64_t lc = (pos[r] + 1) / ratio;
  const int64_t k = lc < K ? lc : K;
  const float* sc = score + r * stride;
  int32_t* out = topk + r * K;
  auto emit = [&](int64_t t, int slot) { out[slot] = static_cast<int32_t>(t); };
  if (lc <= staged) {
    for (int64_t t = threadIdx.x; t < lc; t += blockDim.x) keys[t] = static_cast<uint16_t>(key16(sc[t]));
    __syncthreads();
    block_select(lc, k, [&](int64_t t) { return static_cast<uint32_t>(keys[t]); }, emit);
  } else {
    block_select(lc, k, [&](int64_t t) { return key16(sc[t]); }, emit);
  }
  for (int64_t i = k + threadIdx.x; i < K; i += blockDim.x) out[i] = -1;
}

__global__ void candidate_rows_kernel(const float* score, int64_t stride, const int64_t* pos, int ratio,
                                      int64_t topk_blocks, int64_t B, uint8_t* cand, int64_t cand_stride,
                                      int64_t staged) {
  extern __shared__ uint16_t keys[];
  const int64_t r = blockIdx.x;
  const int64_t lc = (pos[r] + 1) / ratio;
  const int64_t nb = (lc + B - 1) / B;
  const float* sc = score + r * stride;
  uint8_t* m = cand + r * cand_stride;
  for (int64_t t = threadIdx.x; t < lc; t += blockDim.x) m[t] = 0;
  auto block_key = [&](int64_t b) {
    if (b == nb - 1) return key16(__int_as_float(0x7f800000));  // the block of row lc-1 is forced in
    float v = __int_as_float(0xff800000);
    for (int64_t t = b * B; t < (b + 1) * B && t < lc; ++t) v = fmaxf(v, sc[t]);
    return key16(v);
  };
  const uint32_t neg_inf_key = key16(__int_as_float(0xff800000));
  const int64_t k = nb < topk_blocks ? nb : topk_blocks;
  auto keep = [&](int64_t b, uint32_t key) {
    if (key <= neg_inf_key) return;  // blocks at -inf are dropped
    for (int64_t t = b * B; t < (b + 1) * B && t < lc; ++t) m[t] = 1;
  };
  if (nb <= staged) {
    for (int64_t b = threadIdx.x; b < nb; b += blockDim.x) keys[b] = static_cast<uint16_t>(block_key(b));
    __syncthreads();
    block_select(nb, k, [&](int64_t b) { return static_cast<uint32_t>(keys[b]); },
                 [&](int64_t b, int) { keep(b, keys[b]); });
  } else {
    __syncthreads();
    block_select(nb, k, block_key, [&](int64_t b, int) { keep(b, block_key(b)); });
  }
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
  const dim3 grid(static_cast<unsigned>((max_lc + 127) / 128), static_cast<unsigned>(rows));
  const size_t shm = (IH * ihd + IH) * sizeof(float);
  if (shm > 48 * 1024) return cudaErrorInvalidValue;
  switch (ihd) {
    case 32: index_scores_kernel<32><<<grid, 128, shm, s>>>(qi, wt, wscale, pieces, row_piece, pos, IH, ratio, score, stride); break;
    case 64: index_scores_kernel<64><<<grid, 128, shm, s>>>(qi, wt, wscale, pieces, row_piece, pos, IH, ratio, score, stride); break;
    case 128: index_scores_kernel<128><<<grid, 128, shm, s>>>(qi, wt, wscale, pieces, row_piece, pos, IH, ratio, score, stride); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t candidate_rows(float* score, int64_t stride, const int64_t* pos, int64_t rows, int ratio,
                           int64_t topk_blocks, int64_t block, uint8_t* cand, int64_t cand_stride, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  const int64_t staged = (stride + block - 1) / block <= kMaxStaged ? (stride + block - 1) / block : 0;
  if (staged * 2 > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(candidate_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(staged * 2));
    if (e != cudaSuccess) return e;
  }
  candidate_rows_kernel<<<rows, kSelThreads, staged * 2, s>>>(score, stride, pos, ratio, topk_blocks, block, cand,
                                                              cand_stride, staged);
  return cudaGetLastError();
}

cudaError_t apply_candidates(float* score, int64_t stride, const int64_t* pos, int64_t rows, int ratio,
                             const uint8_t* cand, int64_t cand_stride, int64_t max_lc, cudaStream_t s) {
  if (rows == 0 || max_lc == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>((max_lc + 255) / 256), static_cast<unsigned>(rows));
  apply_candidates_kernel<<<grid, 256, 0, s>>>(score, stride, pos, ratio, cand, cand_stride);
  return cudaGetLastError();
}

cudaError_t topk_rows(const float* score, int64_t stride, const int64_t* pos, int64_t rows, int ratio, int64_t k,
                      int32_t* topk, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  const int64_t staged = stride <= kMaxStaged ? stride : 0;
  if (staged * 2 > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(topk_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(staged * 2));
    if (e != cudaSuccess) return e;
  }
  topk_rows_kernel<<<rows, kSelThreads, staged * 2, s>>>(score, stride, pos, ratio, k, topk, staged);
  return cudaGetLastError();
}

}  // namespace dsv4::cuda
