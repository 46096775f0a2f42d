// The lightning indexer's scores on the device (model-spec.md §3.6): bf16 index scores against packed
// FP4 index keys (the candidate blocks and top-k that select from them: attn_topk.cu).
// Index scores come from one of two kernels with the same bits (both give every (head, key) dot
// exactly where the FP4 group exponents allow, else the oracle's fp32 order: attn_index_common.cuh):
// below 8 rows, or for a head count that is not 32 or 64, index_scores_kernel here (group dots by dp4a,
// one (row, key) per thread or per four threads); from 8 rows, index_scores_mma_kernel (attn_index_mma.cu:
// int8 tensor-core MMAs, 8 rows per block against tiles of 128 keys staged in shared memory once for all
// of them). DSV4_INDEX_MMA / set_index_scores_impl force either kernel.
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "backends/cuda/kernels/attention/attention_kernels.cuh"
#include "backends/cuda/kernels/attention/attn_device.cuh"
#include "backends/cuda/kernels/attention/attn_index_common.cuh"
#include "backends/cuda/kernels/attention/attn_index_mma.cuh"

namespace dsv4::cuda {

namespace {

using namespace attn;
using namespace index_detail;

// Index scores per (row, t): the heads' terms bf16(relu(bf16(qi_h . k_t)) * w_h) (the oracle's dot:
// 8 interleaved fp32 partial sums combined pairwise) added in head order, s += term_h, as the
// oracle does; for few rows four threads per t compute a quarter of the terms each, the first adds.
// (qi_h . k_t with its exactness condition: head_dot, attn_index_common.cuh.)
constexpr int kScoreThreads = 256;
constexpr int kScoreKeys = kScoreThreads / 4;  // key rows per block (a quarter of the heads per thread)

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
  // Integer form of every 32-element group of qi, one thread per group.
  for (int64_t task = threadIdx.x; task < IH * G; task += blockDim.x) {
    uint32_t words[8];
    qe[task] = q_group_form(q + task * 32, words);
#pragma unroll
    for (int j = 0; j < 8; ++j) qw[task * 8 + j] = words[j];
  }
  __syncthreads();
  const int64_t lc = (pos[r] + 1) / ratio;
  const RowPages keys = pieces[row_piece[r]].ikeys;
  if (split == 1) {  // one thread per key row, every head
    const int64_t t = static_cast<int64_t>(blockIdx.x) * kScoreThreads + threadIdx.x;
    if (t < lc) score[r * stride + t] = rb(index_terms<IHD>(keys.row(t, IHD / 2 + IHD / 32), q, w, qw, qe, 0, IH, nullptr));
    return;
  }
  // Four threads per key row, a quarter of the heads each; the terms summed in head order after.
  const int tl = threadIdx.x % kScoreKeys, hq = threadIdx.x / kScoreKeys;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kScoreKeys + tl;
  const int64_t hpq = (IH + 3) / 4, h_begin = hq * hpq, h_end = h_begin + hpq < IH ? h_begin + hpq : IH;
  float* terms = reinterpret_cast<float*>(qe + IH * G);  // [kScoreKeys][IH + 1]
  if (t < lc) (void)index_terms<IHD>(keys.row(t, IHD / 2 + IHD / 32), q, w, qw, qe, h_begin, h_end, terms + tl * (IH + 1));
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
  key_form<IHD>(row, kw, ek);
  float s = 0.0f;
  for (int64_t h = h_begin; h < h_end; ++h) {
    float v = rb(head_dot<IHD>(q + h * IHD, qw + h * W, qe + h * G, row, kw, ek));
    v = v < 0.0f ? 0.0f : v;
    const float term = rb(__fmul_rn(v, w[h]));
    if (out) out[h] = term;
    s = __fadd_rn(s, term);
  }
  return s;
}

// -1: not yet read from DSV4_INDEX_MMA; else an IndexScoresImpl value.
std::atomic<int> g_index_impl{-1};

}  // namespace

IndexScoresImpl index_scores_impl() {
  int v = g_index_impl.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* e = std::getenv("DSV4_INDEX_MMA");
    v = static_cast<int>(!e                      ? IndexScoresImpl::automatic
                         : std::strcmp(e, "0") == 0 ? IndexScoresImpl::dp4a
                         : std::strcmp(e, "1") == 0 ? IndexScoresImpl::tensor_core
                                                    : IndexScoresImpl::automatic);
    g_index_impl.store(v, std::memory_order_relaxed);
  }
  return static_cast<IndexScoresImpl>(v);
}

void set_index_scores_impl(IndexScoresImpl impl) { g_index_impl.store(static_cast<int>(impl), std::memory_order_relaxed); }

cudaError_t index_scores(const float* qi, const float* wt, float wscale, const PieceDev* pieces,
                         const int32_t* row_piece, const int64_t* pos, int64_t rows, int64_t IH, int64_t ihd,
                         int ratio, float* score, int64_t stride, int64_t max_lc, cudaStream_t s) {
  if (rows == 0 || max_lc == 0) return cudaSuccess;
  if (ihd != 32 && ihd != 64 && ihd != 128) return cudaErrorInvalidValue;
  // Tensor cores for 8 rows and more (the dp4a kernel's one thread per (row, key) wins below), for
  // 32 or 64 heads; both kernels give the same bits.
  const IndexScoresImpl impl = index_scores_impl();
  const bool mma_shape = (IH == 32 || IH == 64) && (rows + kMmaRows - 1) / kMmaRows <= 65535;
  if (mma_shape && impl != IndexScoresImpl::dp4a && (impl == IndexScoresImpl::tensor_core || rows >= kMmaMinRows)) {
    return index_detail::index_scores_mma(qi, wt, wscale, pieces, row_piece, pos, rows, IH, ihd, ratio, score, stride,
                                          max_lc, s);
  }
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
    default: return launch(index_scores_kernel<128>);
  }
}

}  // namespace dsv4::cuda