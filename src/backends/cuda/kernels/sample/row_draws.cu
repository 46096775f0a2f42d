// Row draws on the device (see row_draws.cuh). Two passes over each row, cut into slices spread over blocks:
//   1. each slice's best: the argmax (value, then lowest id; NaN as -inf; truncated rows too, with a NaN or +inf
//      flagging the row) or, for Gumbel rows, the first of largest (score, x) in id order, with any non-finite logit
//      flagging the row;
//   2. every block combines its row's slice bests (a selection, so the same whatever the order) and, for Gumbel rows,
//      appends each of its ids that meets the candidate rule of lanes/gumbel_candidates.h.
// Truncated rows then take the passes of truncated_draws.cu, and rows asking logprobs those of logprob_draws.cu.
// The scores use CUDA's double log (within 1 ulp); the rule's margin covers that (the proof is in
// gumbel_candidates.h; it holds when the two passes' logarithms differ too, as each is within the bound).
#include "backends/cuda/kernels/sample/row_draws.cuh"

#include <cmath>

#include "backends/cuda/kernels/sample/draw_best.cuh"
#include "backends/cuda/kernels/sample/logprob_draws.cuh"
#include "backends/cuda/kernels/sample/truncated_draws.cuh"
#include "lanes/gumbel_candidates.h"

namespace dsv4::cuda {

static_assert(kDrawCandidates == lanes::kMaxGumbelCandidates, "the device carries the host's candidate cap");

namespace {

using namespace draw;  // draw_best.cuh: the best-candidate order and block reductions both files share

__global__ void __launch_bounds__(kThreads) draw_slices_kernel(const float* logits, int64_t V, const RowDrawDev* draws,
                                                               const uint64_t* masks, DrawPartDev* parts,
                                                               RowPickDev* picks, int slices) {
  __shared__ Best sh[kThreads];
  __shared__ int irregular;
  const int64_t r = blockIdx.y;
  const RowDrawDev d = draws[r];
  if (d.kind == kDrawWhole) return;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    picks[r].token = -1;
    picks[r].count = 0;
    picks[r].irregular = 0;
    picks[r].uncertain = 0;
  }
  if (threadIdx.x == 0) irregular = 0;
  __syncthreads();
  const float* row = logits + r * V;
  const int64_t begin = blockIdx.x * kSlice, end = begin + kSlice < V ? begin + kSlice : V;
  Best mine{-INFINITY, 0.0, -1};
  bool odd = false;
  const uint64_t* mask = d.mask >= 0 ? masks + d.mask : nullptr;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const bool in = draw::allowed(mask, i);
    if (!in && d.kind != kDrawTruncated) continue;  // argmax and Gumbel rows skip the other ids
    const float l = in ? row[i] : -INFINITY;        // truncated rows read them as -inf
    Best c{0.0, 0.0, i};
    if (d.kind == kDrawArgmax) {
      c.score = isnan(l) ? -INFINITY : static_cast<double>(l);
    } else if (d.kind == kDrawTruncated) {  // its first id of largest logit; a NaN or +inf sends it whole
      if (isnan(l) || l == INFINITY) {
        odd = true;
        continue;
      }
      c.score = static_cast<double>(l);
    } else {
      if (!isfinite(l)) {
        odd = true;
        continue;
      }
      c.score = device_score(l, d.temperature, d.key, i, &c.x);
    }
    if (before(c, mine)) mine = c;
  }
  if (odd) irregular = 1;  // a benign race: every writer writes 1
  const Best b = block_best(mine, sh);
  if (threadIdx.x == 0) parts[r * slices + blockIdx.x] = DrawPartDev{b.score, b.x, b.id, irregular, 0};
}

__global__ void __launch_bounds__(kThreads) draw_candidates_kernel(const float* logits, int64_t V,
                                                                   const RowDrawDev* draws, const uint64_t* masks,
                                                                   const DrawPartDev* parts, RowPickDev* picks,
                                                                   int slices) {
  __shared__ Best row_best;
  __shared__ int row_irregular;
  const int64_t r = blockIdx.y;
  const RowDrawDev d = draws[r];
  if (d.kind != kDrawArgmax && d.kind != kDrawGumbel) return;  // truncated rows: truncated_draws.cu
  if (threadIdx.x == 0) {
    Best b{-INFINITY, 0.0, -1};
    int odd = 0;
    for (int k = 0; k < slices; ++k) {
      const DrawPartDev& p = parts[r * slices + k];
      const Best c{p.score, p.x, p.id};
      if (before(c, b)) b = c;
      odd |= p.irregular;
    }
    row_best = b;
    row_irregular = odd;
  }
  __syncthreads();
  if (d.kind == kDrawArgmax) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      picks[r].token = static_cast<int32_t>(row_best.id);
      if (row_best.id >= 0) picks[r].logits[0] = logits[r * V + row_best.id];  // for its logprob
    }
    return;
  }
  if (row_irregular) {
    if (blockIdx.x == 0 && threadIdx.x == 0) picks[r].irregular = 1;
    return;
  }
  // The rule: id i is a candidate iff s_i + slack(x_i) >= s_b - slack(x_b). An id whose u is not 1 has a score of at
  // most x + kGumbelTermBound (rounded up), so one below the rule by that bound needs no logarithm.
  const double right = row_best.score - lanes::gumbel_slack(row_best.x);
  const float* row = logits + r * V;
  const int64_t begin = blockIdx.x * kSlice, end = begin + kSlice < V ? begin + kSlice : V;
  const uint64_t* mask = d.mask >= 0 ? masks + d.mask : nullptr;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    if (!draw::allowed(mask, i)) continue;
    const float l = row[i];
    const double x0 = static_cast<double>(l) / d.temperature;
    const uint64_t bits = lanes::token_key(d.key, static_cast<lanes::TokenId>(i));
    if (!lanes::key_uniform_is_one(bits) && (x0 + lanes::kGumbelTermBound) + lanes::gumbel_slack(x0) < right) continue;
    double x = 0.0;
    const double score = device_score(l, d.temperature, d.key, i, &x);
    if (score + lanes::gumbel_slack(x) < right) continue;
    const int slot = atomicAdd(&picks[r].count, 1);
    if (slot < kDrawCandidates) {
      picks[r].ids[slot] = static_cast<int32_t>(i);
      picks[r].logits[slot] = l;
    }
  }
}

__global__ void gather_rows_kernel(const float* logits, int64_t V, const int32_t* rows, float* out) {
  const float* src = logits + static_cast<int64_t>(rows[blockIdx.y]) * V;
  float* dst = out + static_cast<int64_t>(blockIdx.y) * V;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < V;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

}  // namespace

int64_t row_draw_slices(int64_t V) { return V <= 0 ? 1 : (V + kSlice - 1) / kSlice; }

namespace {
size_t parts_bytes(int64_t n, int64_t V) {
  return (static_cast<size_t>(n * row_draw_slices(V)) * sizeof(DrawPartDev) + 255) / 256 * 256;
}
}  // namespace

size_t row_draw_scratch_bytes(int64_t n, int64_t V) {
  return parts_bytes(n, V) + truncated_draw_scratch_bytes(n, V) + logprob_draw_scratch_bytes(n, V);
}

cudaError_t row_draws(const float* logits, int64_t n, int64_t V, const RowDrawDev* draws, const uint64_t* masks,
                      RowDrawPasses passes, void* scratch, RowPickDev* picks, cudaStream_t s) {
  if (n <= 0 || V <= 0) return cudaSuccess;
  if (n > 65535) return cudaErrorInvalidValue;
  auto* parts = static_cast<DrawPartDev*>(scratch);
  char* truncated_scratch = static_cast<char*>(scratch) + parts_bytes(n, V);
  char* logprob_scratch = truncated_scratch + truncated_draw_scratch_bytes(n, V);
  const int slices = static_cast<int>(row_draw_slices(V));
  const dim3 grid(static_cast<unsigned>(slices), static_cast<unsigned>(n));
  draw_slices_kernel<<<grid, kThreads, 0, s>>>(logits, V, draws, masks, parts, picks, slices);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  draw_candidates_kernel<<<grid, kThreads, 0, s>>>(logits, V, draws, masks, parts, picks, slices);
  e = cudaGetLastError();
  if (e == cudaSuccess && passes.truncated)
    e = truncated_draws(logits, n, V, draws, masks, parts, truncated_scratch, picks, s);
  if (e == cudaSuccess && passes.logprobs) e = logprob_draws(logits, n, V, draws, logprob_scratch, picks, s);
  return e;
}

cudaError_t gather_logit_rows(const float* logits, int64_t V, const int32_t* rows, int64_t n_rows, float* out,
                              cudaStream_t s) {
  if (n_rows <= 0 || V <= 0) return cudaSuccess;
  if (n_rows > 65535) return cudaErrorInvalidValue;
  const int64_t blocks = (V + 4 * kThreads - 1) / (4 * kThreads);
  gather_rows_kernel<<<dim3(static_cast<unsigned>(blocks < 64 ? blocks : 64), static_cast<unsigned>(n_rows)), kThreads,
                       0, s>>>(logits, V, rows, out);
  return cudaGetLastError();
}

}  // namespace dsv4::cuda
