// The mHC expand of four consecutive elements of one row, for C streams known at compile time: the
// per-element operations of block_ops.cu's expand_kernel (h_k = bf16(post_k * y + sum_j A[j][k] h_j), the
// sum over j in order from +0), shared by the expand and by the MoE combine + expand.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/bf16.h"

namespace dsv4::cuda {

// h [rows, kC, D] in place at row r, elements i .. i + 3 (16-byte aligned); y: the four new values;
// mix: the row's coefficients (pre [kC], post [kC], A [kC][kC]).
template <int kC>
__device__ __forceinline__ void hc_expand4(float* h, int64_t r, int64_t D, int64_t i, const float (&y)[4],
                                           const float* mix) {
  const float* post = mix + kC;
  const float* A = mix + 2 * kC;
  float4 hv[kC];
#pragma unroll
  for (int j = 0; j < kC; ++j) hv[j] = *reinterpret_cast<const float4*>(h + (r * kC + j) * D + i);
#pragma unroll
  for (int k = 0; k < kC; ++k) {
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < kC; ++j) {
      const float a = A[j * kC + k];
      s[0] += a * hv[j].x, s[1] += a * hv[j].y, s[2] += a * hv[j].z, s[3] += a * hv[j].w;
    }
    const float pk = post[k];
    float4 nv;
    nv.x = dsv4::round_bf16(pk * y[0] + s[0]);
    nv.y = dsv4::round_bf16(pk * y[1] + s[1]);
    nv.z = dsv4::round_bf16(pk * y[2] + s[2]);
    nv.w = dsv4::round_bf16(pk * y[3] + s[3]);
    *reinterpret_cast<float4*>(h + (r * kC + k) * D + i) = nv;
  }
}

}  // namespace dsv4::cuda
