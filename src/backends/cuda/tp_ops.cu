// Kernels of the tensor-parallel forward (declared in tp_ops.cuh).
#include "backends/cuda/tp_ops.cuh"

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

}  // namespace dsv4::cuda
