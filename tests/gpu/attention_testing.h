// Helpers shared by the GPU attention tests (attention_cuda_test, attention_v41_shape_cuda_test,
// index_scores_cuda_test): the CUDA status assertion, float bit patterns for exact comparisons and the FP4
// QDQ of an index query group.
#pragma once

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/fp4.h"
#include "core/quant.h"
#include "core/ue8m0.h"

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

namespace dsv4::gpu_testing {

inline uint32_t bits_of(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

// In place on x[32]: FP4 (e2m1) values with one UE8M0 scale from the group's largest magnitude.
inline void qdq_fp4_ue8m0_32(float* x) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float sv = ue8m0_to_f32(fp4_ue8m0_scale(amax));
  for (int i = 0; i < 32; ++i) x[i] = e2m1_to_f32(fp4_ue8m0_code(x[i], 1.0f / sv)) * sv;
}

}  // namespace dsv4::gpu_testing
