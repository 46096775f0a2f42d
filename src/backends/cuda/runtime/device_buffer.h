// DeviceBuffer: one owning cudaMalloc allocation, moved not copied, freed on destruction.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

namespace dsv4::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes && cudaMalloc(&ptr_, bytes) != cudaSuccess) {
      ptr_ = nullptr;
      bytes_ = 0;
    }
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // False when the allocation failed (or size 0).
  explicit operator bool() const { return ptr_ != nullptr; }
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace dsv4::cuda
