// The KV pool's slabs and pages (see kv_pool.h).
#include "backends/cuda/forward/kv_pool.h"

#include <algorithm>

namespace dsv4::cuda {

namespace {

constexpr int64_t kGrowPages = 16;  // pages a growing pool adds at least at once

Status clear(uint8_t* p, int64_t bytes, cudaStream_t s) {
  const cudaError_t e = cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), s);
  if (e != cudaSuccess) return error(StatusCode::internal, "KV pool: clearing {} bytes: {}", bytes, cudaGetErrorString(e));
  return ok_status();
}

}  // namespace

StatusOr<std::unique_ptr<KvPool>> KvPool::create(const KvPoolShape& shape) {
  if (shape.slab_bytes <= 0 || shape.page_bytes < 0 || shape.slabs < 0 || shape.pages < 0)
    return error(StatusCode::invalid_argument, "KV pool: slabs of {} B, pages of {} B, {} slabs, {} pages",
                 shape.slab_bytes, shape.page_bytes, shape.slabs, shape.pages);
  if (shape.slabs == 0 && shape.pages > 0)
    return error(StatusCode::invalid_argument, "KV pool: {} pages but no stream slabs", shape.pages);
  std::unique_ptr<KvPool> p(new KvPool(shape));
  if (shape.fixed()) DSV4_RETURN_IF_ERROR(p->grow(shape.slabs, shape.pages));
  return p;
}

Status KvPool::grow(int32_t slabs, int64_t pages) {
  const int64_t bytes = slabs * shape_.slab_bytes + pages * shape_.page_bytes;
  DeviceBuffer b(static_cast<size_t>(bytes));
  if (!b)
    return error(StatusCode::resource_exhausted, "KV pool: cannot allocate {} MiB of device memory ({} stream slabs, {} pages)",
                 (bytes + (1 << 20) - 1) >> 20, slabs, pages);
  uint8_t* at = b.as<uint8_t>();
  // Taken from the back: lower addresses first.
  for (int32_t i = slabs - 1; i >= 0; --i) free_slabs_.push_back(at + i * shape_.slab_bytes);
  at += slabs * shape_.slab_bytes;
  for (int64_t i = pages - 1; i >= 0; --i) free_pages_.push_back(at + i * shape_.page_bytes);
  slabs_total_ += slabs;
  pages_total_ += pages;
  segments_.push_back(std::move(b));
  return ok_status();
}

StatusOr<uint8_t*> KvPool::take_slab(cudaStream_t s) {
  if (free_slabs_.empty()) {
    if (shape_.fixed())
      return error(StatusCode::resource_exhausted, "KV pool: all {} stream slots are in use", shape_.slabs);
    DSV4_RETURN_IF_ERROR(grow(1, 0));
  }
  uint8_t* slab = free_slabs_.back();
  DSV4_RETURN_IF_ERROR(clear(slab, shape_.slab_bytes, s));
  free_slabs_.pop_back();
  return slab;
}

void KvPool::give_slab(uint8_t* slab) {
  if (slab) free_slabs_.push_back(slab);
}

Status KvPool::take_pages(int64_t n, cudaStream_t s, std::vector<uint8_t*>* out) {
  if (n <= 0) return ok_status();
  if (free_pages() < n) {
    if (shape_.fixed())
      return error(StatusCode::resource_exhausted, "KV pool: {} pages of {} KiB wanted, {} of {} free", n,
                   shape_.page_bytes >> 10, free_pages(), shape_.pages);
    DSV4_RETURN_IF_ERROR(grow(0, std::max(kGrowPages, n - free_pages())));
  }
  const size_t first = out->size();
  out->insert(out->end(), free_pages_.rbegin(), free_pages_.rbegin() + n);
  for (size_t i = first; i < out->size();) {  // one clear per run of adjacent pages
    size_t j = i + 1;
    while (j < out->size() && (*out)[j] == (*out)[j - 1] + shape_.page_bytes) ++j;
    if (Status st = clear((*out)[i], static_cast<int64_t>(j - i) * shape_.page_bytes, s); !st.ok()) {
      out->resize(first);
      return st;
    }
    i = j;
  }
  free_pages_.resize(free_pages_.size() - n);
  return ok_status();
}

void KvPool::give_pages(std::span<uint8_t* const> pages) {
  for (uint8_t* p : pages)
    if (p) free_pages_.push_back(p);
}

int64_t KvPool::bytes() const {
  int64_t b = 0;
  for (const DeviceBuffer& s : segments_) b += static_cast<int64_t>(s.bytes());
  return b;
}

}  // namespace dsv4::cuda
