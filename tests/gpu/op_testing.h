// Helpers shared by the GPU op tests: bf16-valued random inputs, copies to and from the device, and the sparse
// attention implementation held for one test.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <random>
#include <vector>

#include "core/bf16.h"
#include "backends/cuda/kernels/attention/attention_kernels.cuh"
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

// n values of type T copied from device memory.
template <typename T>
std::vector<T> to_host(const void* p, size_t n) {
  std::vector<T> v(n);
  cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
  return v;
}

// Selects a sparse attention implementation for its lifetime, whatever DSV4_ATTN_TC asks for.
class ScopedSparseAttention {
 public:
  explicit ScopedSparseAttention(cuda::SparseAttentionImpl impl) : saved_(cuda::sparse_attention_impl()) {
    cuda::set_sparse_attention_impl(impl);
  }
  ~ScopedSparseAttention() { cuda::set_sparse_attention_impl(saved_); }
  ScopedSparseAttention(const ScopedSparseAttention&) = delete;
  ScopedSparseAttention& operator=(const ScopedSparseAttention&) = delete;

 private:
  cuda::SparseAttentionImpl saved_;
};

}  // namespace dsv4::gpu_testing
