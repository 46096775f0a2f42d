// The KV pool: the device memory of every stream's caches (docs/kv-pool.md). Each open stream takes one slab (its
// rings and page table, family::PageLayout::slab_bytes) and, as it grows, pages of its append-only row tables
// (compressed and index-key rows, page_bytes each, one per page_positions positions). Pages are freed when the stream
// closes, is restored, or rolls back past a page's first position; they are zeroed when taken.
//
// Fixed pools hold a set number of slabs and pages in one allocation made at the start (serving: admission counts its
// real free bytes, and a stream never waits on cudaMalloc); growing pools (slabs = pages = 0) allocate more as
// streams ask (tests, benchmarks, tools).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "backends/cuda/runtime/device_buffer.h"
#include "core/status.h"

namespace dsv4::cuda {

struct KvPoolShape {
  int64_t slab_bytes = 0;  // > 0
  int64_t page_bytes = 0;  // >= 0 (0: a model without row tables)
  int32_t slabs = 0;       // fixed: slabs and pages held from the start; both 0: grows on demand
  int64_t pages = 0;
  bool fixed() const { return slabs > 0; }
  int64_t bytes() const { return slabs * slab_bytes + pages * page_bytes; }
};

class KvPool {
 public:
  // Refuses a fixed pool the device cannot hold, naming its size.
  static StatusOr<std::unique_ptr<KvPool>> create(const KvPoolShape& shape);

  const KvPoolShape& shape() const { return shape_; }
  // A zeroed slab (cleared on `s`, ordered before the work that follows there); resource_exhausted when a fixed
  // pool's slabs are all taken or the device is out of memory.
  StatusOr<uint8_t*> take_slab(cudaStream_t s);
  void give_slab(uint8_t* slab);
  // n zeroed pages appended to *out, all or none; resource_exhausted names what is missing.
  Status take_pages(int64_t n, cudaStream_t s, std::vector<uint8_t*>* out);
  void give_pages(std::span<uint8_t* const> pages);

  int32_t free_slabs() const { return static_cast<int32_t>(free_slabs_.size()); }
  int64_t free_pages() const { return static_cast<int64_t>(free_pages_.size()); }
  int64_t pages_in_use() const { return pages_total_ - free_pages(); }
  int32_t slabs_in_use() const { return slabs_total_ - free_slabs(); }
  // Device bytes the pool holds (fixed: shape().bytes(); growing: what it has allocated so far).
  int64_t bytes() const;

 private:
  explicit KvPool(const KvPoolShape& shape) : shape_(shape) {}
  Status grow(int32_t slabs, int64_t pages);  // one more segment
  KvPoolShape shape_;
  std::vector<DeviceBuffer> segments_;
  std::vector<uint8_t*> free_slabs_, free_pages_;  // taken from the back
  int32_t slabs_total_ = 0;
  int64_t pages_total_ = 0;
};

}  // namespace dsv4::cuda
