// Helpers shared by the GPU attention tests (attention_cuda_test, attention_v41_shape_cuda_test):
// the CUDA status assertion and float bit patterns for exact comparisons.
#pragma once

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

namespace dsv4::gpu_testing {

inline uint32_t bits_of(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

}  // namespace dsv4::gpu_testing
