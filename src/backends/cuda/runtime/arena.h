// Arena: one cudaMalloc carved by a bump pointer; mark/reset give per-call scratch without frees.
#pragma once

#include <cstddef>
#include <memory>

namespace dsv4::cuda {

struct Exl3Store;

// Not thread-safe; one owner at a time. Usable from .cu and .cc files (no Status here: a failed
// allocation is a nullptr / zero capacity the caller turns into an error naming what it wanted).
class Arena {
 public:
  Arena() = default;
  // Allocates `bytes` on the current device; capacity() is 0 when cudaMalloc failed.
  explicit Arena(size_t bytes);
  // An arena that only counts: alloc hands out addresses of no memory (never to be dereferenced) with the
  // alignment a device allocation has, so used() after a sequence of allocs is what the real arena needs.
  static Arena measuring();
  bool is_measuring() const { return measuring_; }
  ~Arena();
  Arena(Arena&& o) noexcept;
  Arena& operator=(Arena&& o) noexcept;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // `bytes` aligned to `align` (a power of two); nullptr when the arena is full. alloc(0) returns
  // a valid aligned pointer that must not be dereferenced.
  void* alloc(size_t bytes, size_t align = 256);
  template <typename T>
  T* alloc_n(size_t n, size_t align = 256) { return static_cast<T*>(alloc(n * sizeof(T), align)); }

  size_t mark() const { return used_; }
  // Frees everything allocated after mark() returned `m` (m <= used()).
  void reset(size_t m) { if (m <= used_) used_ = m; }
  size_t used() const { return used_; }
  size_t capacity() const { return capacity_; }
  void* base() const { return base_; }

  // Host side of the EXL3 views whose tensors live in this arena (exl3_view.h); null without any.
  std::shared_ptr<Exl3Store> exl3;

 private:
  char* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
  bool measuring_ = false;
};

}  // namespace dsv4::cuda
