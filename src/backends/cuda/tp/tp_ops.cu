// Kernels of the tensor-parallel forward (declared in tp_ops.cuh).
#include "backends/cuda/tp/tp_ops.cuh"

#include "core/bf16.h"

namespace dsv4::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void own_pairs_kernel(const int32_t* pair_expert, int64_t n, int32_t lo, int32_t hi, int32_t* mine) {
  const int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (p >= n) return;
  const int32_t e = pair_expert[p];
  mine[p] = e >= lo && e < hi ? e : -1;
}

// One block row per pair, threads along D.
__global__ void pick_pairs_kernel(const float* gathered, const int32_t* pair_expert, int64_t n, int64_t D,
                                  int32_t per_rank, float* out) {
  const int64_t p = blockIdx.y;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= D) return;
  const int64_t owner = pair_expert[p] / per_rank;
  out[p * D + i] = gathered[(owner * n + p) * D + i];
}

__global__ void interleave_kernel(const float* gathered, int32_t world, int64_t rows, int64_t cols, float* out) {
  const int64_t r = blockIdx.y;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;  // column of the output row
  if (i >= world * cols) return;
  const int64_t k = i / cols, j = i % cols;
  out[r * world * cols + i] = gathered[(k * rows + r) * cols + j];
}

// One block per row: the rank's embedding row of ids[r] when it holds it (lo <= id < lo + Vl), else zeros
// (never picked: the owner's copy is).
__global__ void embed_local_kernel(const uint16_t* slice, const int32_t* ids, int64_t lo, int64_t Vl, int64_t D,
                                   float* out) {
  const int64_t r = blockIdx.x;
  const int64_t id = ids[r];
  const bool mine = id >= lo && id < lo + Vl;
  const uint16_t* e = slice + (mine ? id - lo : 0) * D;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) out[r * D + i] = mine ? dsv4::bf16_to_f32(e[i]) : 0.0f;
}

// One block per row: the owner's row copied into every stream (as embed_streams), pi = (1, 0, ..., 0).
__global__ void embed_pick_kernel(const float* gathered, const int32_t* ids, int64_t rows, int64_t Vl, int C,
                                  int64_t D, float* h, float* pi) {
  const int64_t r = blockIdx.x;
  const float* e = gathered + (static_cast<int64_t>(ids[r]) / Vl * rows + r) * D;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    const float v = e[i];
    for (int c = 0; c < C; ++c) h[(r * C + c) * D + i] = v;
  }
  if (threadIdx.x < C) pi[r * C + threadIdx.x] = threadIdx.x == 0 ? 1.0f : 0.0f;
}

unsigned blocks(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

cudaError_t tp_own_pairs(const int32_t* pair_expert, int64_t n_pairs, int32_t lo, int32_t hi, int32_t* mine,
                         cudaStream_t s) {
  if (n_pairs == 0) return cudaSuccess;
  own_pairs_kernel<<<blocks(n_pairs), kThreads, 0, s>>>(pair_expert, n_pairs, lo, hi, mine);
  return cudaGetLastError();
}

cudaError_t tp_pick_pairs(const float* gathered, const int32_t* pair_expert, int64_t n_pairs, int64_t D,
                          int32_t per_rank, float* out, cudaStream_t s) {
  if (n_pairs == 0) return cudaSuccess;
  if (per_rank < 1 || n_pairs > 65535) return cudaErrorInvalidValue;
  pick_pairs_kernel<<<dim3(blocks(D), static_cast<unsigned>(n_pairs)), kThreads, 0, s>>>(gathered, pair_expert, n_pairs,
                                                                                         D, per_rank, out);
  return cudaGetLastError();
}

cudaError_t tp_interleave_ranks(const float* gathered, int32_t world, int64_t rows, int64_t cols, float* out,
                                cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (rows > 65535) return cudaErrorInvalidValue;
  interleave_kernel<<<dim3(blocks(world * cols), static_cast<unsigned>(rows)), kThreads, 0, s>>>(gathered, world, rows,
                                                                                                cols, out);
  return cudaGetLastError();
}

cudaError_t tp_embed_local(const uint16_t* slice, const int32_t* ids, int64_t rows, int64_t lo, int64_t Vl, int64_t D,
                           float* out, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  embed_local_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(slice, ids, lo, Vl, D, out);
  return cudaGetLastError();
}

cudaError_t tp_embed_pick(const float* gathered, const int32_t* ids, int64_t rows, int64_t Vl, int C, int64_t D,
                          float* h, float* pi, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (Vl < 1 || C > kThreads) return cudaErrorInvalidValue;
  embed_pick_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(gathered, ids, rows, Vl, C, D, h, pi);
  return cudaGetLastError();
}

}  // namespace dsv4::cuda
