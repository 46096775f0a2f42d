// Arena: the single device allocation and its bump pointer.
#include "backends/cuda/runtime/arena.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

namespace dsv4::cuda {

Arena::Arena(size_t bytes) {
  void* p = nullptr;
  if (bytes && cudaMalloc(&p, bytes) == cudaSuccess) {
    base_ = static_cast<char*>(p);
    capacity_ = bytes;
  } else {
    (void)cudaGetLastError();  // leave no sticky-looking error behind for the next launch check
  }
}

Arena Arena::measuring() {
  Arena a;
  a.base_ = reinterpret_cast<char*>(uintptr_t{1} << 40);  // 2 MiB-aligned like a large cudaMalloc; never touched
  a.capacity_ = size_t{1} << 52;
  a.measuring_ = true;
  return a;
}

Arena::~Arena() {
  if (base_ && !measuring_) cudaFree(base_);
}

Arena::Arena(Arena&& o) noexcept
    : exl3(std::move(o.exl3)),
      base_(std::exchange(o.base_, nullptr)),
      capacity_(std::exchange(o.capacity_, 0)),
      used_(std::exchange(o.used_, 0)),
      measuring_(std::exchange(o.measuring_, false)) {}

Arena& Arena::operator=(Arena&& o) noexcept {
  std::swap(base_, o.base_);
  std::swap(capacity_, o.capacity_);
  std::swap(used_, o.used_);
  std::swap(exl3, o.exl3);
  std::swap(measuring_, o.measuring_);
  return *this;
}

void* Arena::alloc(size_t bytes, size_t align) {
  if (!base_ || align == 0 || (align & (align - 1))) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(base_) + used_;
  const uintptr_t aligned = (start + align - 1) & ~(uintptr_t(align) - 1);
  const size_t offset = aligned - reinterpret_cast<uintptr_t>(base_);
  if (offset > capacity_ || bytes > capacity_ - offset) return nullptr;
  used_ = offset + bytes;
  return base_ + offset;
}

}  // namespace dsv4::cuda
