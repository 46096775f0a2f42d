// V4 / 0731 block kernels outside attention: hash routing and hc_head's pre-mix (see v4_ops.cuh).
#include "backends/cuda/kernels/block/v4_ops.cuh"

#include "backends/cuda/kernels/attention/attn_device.cuh"

namespace dsv4::cuda {

namespace {

__device__ inline float softplus_f(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// One thread per row: K experts in table order, weights normalised in slot order.
__global__ void route_hash_kernel(const float* logits, int64_t rows, int64_t E, int K, const int32_t* tid2eid,
                                  const int32_t* ids, float route_scale, int32_t* sel, float* wts) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const int32_t* row = tid2eid + static_cast<int64_t>(ids[r]) * K;
  float sum = 0.0f;
  for (int k = 0; k < K; ++k) sum = __fadd_rn(sum, sqrtf(softplus_f(logits[r * E + row[k]])));
  for (int k = 0; k < K; ++k) {
    const float w = __fdiv_rn(sqrtf(softplus_f(logits[r * E + row[k]])), sum);
    sel[r * K + k] = row[k];
    wts[r * K + k] = __fmul_rn(w, route_scale);
  }
}

// One block per row: the sum of squares over C*D in a fixed tree, then C sigmoids.
__global__ void hc_head_pre_kernel(const float* m, const float* h, int C, int64_t n, const float* base, float scale,
                                   float norm_eps, float hc_eps, float* pre) {
  __shared__ float red[33];
  const int64_t r = blockIdx.x;
  const float* x = h + r * n;
  float l = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) l = __fadd_rn(l, __fmul_rn(x[i], x[i]));
  const float ss = attn::block_sum(l, red);
  const float rho = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, static_cast<float>(n)), norm_eps)));
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float z = __fadd_rn(__fmul_rn(__fmul_rn(m[r * C + c], rho), scale), base[c]);
    pre[r * C + c] = __fadd_rn(__fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-z))), hc_eps);
  }
}

}  // namespace

cudaError_t moe_route_hash(const float* logits, int64_t rows, int64_t E, int K, const int32_t* tid2eid,
                           const int32_t* ids, float route_scale, int32_t* sel, float* wts, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (!tid2eid || !ids || K < 1) return cudaErrorInvalidValue;
  route_hash_kernel<<<static_cast<unsigned>((rows + 127) / 128), 128, 0, s>>>(logits, rows, E, K, tid2eid, ids,
                                                                              route_scale, sel, wts);
  return cudaGetLastError();
}

cudaError_t hc_head_pre(const float* m, const float* h, int64_t rows, int C, int64_t D, const float* base, float scale,
                        float norm_eps, float hc_eps, float* pre, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  hc_head_pre_kernel<<<static_cast<unsigned>(rows), 256, 0, s>>>(m, h, C, static_cast<int64_t>(C) * D, base, scale,
                                                                 norm_eps, hc_eps, pre);
  return cudaGetLastError();
}

}  // namespace dsv4::cuda
