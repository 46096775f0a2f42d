// The aligner's unfold (vision_kernels.cuh unfold): one thread per element of the aligner's input, zeros
// where the r x r block reaches past the patch grid.
#include "backends/cuda/vision/vision_kernels.cuh"

namespace dsv4::cuda::vision {
namespace {

constexpr int kThreads = 256;

__global__ void unfold_kernel(const float* x, int64_t gh, int64_t gw, int64_t V, int r, float* u) {
  const int64_t bw = (gw + r - 1) / r, F = V * r * r;
  const int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (t >= (gh + r - 1) / r * bw * F) return;
  const int64_t cell = t / F, f = t % F;
  const int64_t c = f / (r * r), kh = f / r % r, kw = f % r;
  const int64_t i = cell / bw * r + kh, j = cell % bw * r + kw;
  u[t] = i < gh && j < gw ? x[(i * gw + j) * V + c] : 0.0f;
}

}  // namespace

cudaError_t unfold(const float* x, int64_t gh, int64_t gw, int64_t V, int r, float* u, cudaStream_t s) {
  const int64_t n = (gh + r - 1) / r * ((gw + r - 1) / r) * V * r * r;
  if (n > 0) unfold_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, s>>>(x, gh, gw, V, r, u);
  return cudaGetLastError();
}

}  // namespace dsv4::cuda::vision
