// Launchers of the V4 / 0731 block kernels outside attention (model-spec.md §8): hash routing
// through tid2eid and hc_head's pre-mix of the final collapse. Plain pointers and sizes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda {

// Hash-routed MoE layer: sel int32 [rows, K] = tid2eid[ids[r]] in table order; wts f32 [rows, K] =
// s_e / sum(s) * route_scale with s_e = sqrt(softplus(logits[r, e])) (no bias, no +eps).
cudaError_t moe_route_hash(const float* logits, int64_t rows, int64_t E, int K, const int32_t* tid2eid,
                           const int32_t* ids, float route_scale, int32_t* sel, float* wts, cudaStream_t s);

// hc_head pre-mix per row from m = fp32-linear(h; fn) [rows, C] and h bf16 [rows, C*D]:
// pre f32 [rows, C] = sigmoid(m * rsqrt(mean(h^2) + norm_eps) * scale + base) + hc_eps.
cudaError_t hc_head_pre(const float* m, const float* h, int64_t rows, int C, int64_t D, const float* base, float scale,
                        float norm_eps, float hc_eps, float* pre, cudaStream_t s);

}  // namespace dsv4::cuda
