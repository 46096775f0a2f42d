// Helpers shared by the GPU op tests: bf16-valued random inputs and host-to-device copies.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <random>
#include <vector>

#include "core/bf16.h"
#include "backends/cuda/runtime/device_buffer.h"

namespace dsv4::gpu_testing {

// n normal values of standard deviation `scale`, each rounded to bf16 (as the forward's inputs are).
inline std::vector<float> random_bf16(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = round_bf16(d(g));
  return v;
}

// A device copy of v with 16 spare bytes (vector loads may read past the end).
template <typename T>
cuda::DeviceBuffer to_device(const std::vector<T>& v) {
  cuda::DeviceBuffer b(v.size() * sizeof(T) + 16);
  cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
  return b;
}

}  // namespace dsv4::gpu_testing
