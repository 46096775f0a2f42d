// CallMeta and PinnedBuffer: pinned staging of per-call metadata and of logits (see call_meta.h).
#include "backends/cuda/runtime/call_meta.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "backends/cuda/runtime/check.h"
#include "backends/cuda/model/upload.h"

namespace dsv4::cuda {

CallMeta::~CallMeta() { release(); }

void CallMeta::release() {
  if (host_) cudaFreeHost(host_);
  if (device_) cudaFree(device_);
  host_ = device_ = nullptr;
  capacity_ = 0;
}

Status CallMeta::begin(size_t bytes, bool* moved) {
  used_ = 0;
  *moved = false;
  if (bytes <= capacity_) return ok_status();
  release();
  const size_t want = padded(std::max<size_t>(bytes + bytes / 4, 64 << 10));
  DSV4_RETURN_IF_ERROR(cuda_status(cudaHostAlloc(&host_, want, cudaHostAllocDefault), "allocating pinned call metadata"));
  const cudaError_t e = cudaMalloc(&device_, want);
  if (e != cudaSuccess) {
    cudaFreeHost(host_);
    host_ = nullptr;
    return cuda_status(e, "allocating device call metadata");
  }
  capacity_ = want;
  *moved = true;
  return ok_status();
}

StatusOr<void*> CallMeta::put(const void* src, size_t n, std::string_view what) {
  const size_t at = used_, size = padded(std::max<size_t>(n, 1));
  if (at + size > capacity_)
    return error(StatusCode::internal, "call metadata: {} needs {} bytes past {} of {}", what, n, at, capacity_);
  if (n) std::memcpy(static_cast<char*>(host_) + at, src, n);
  used_ = at + size;
  return static_cast<void*>(static_cast<char*>(device_) + at);
}

Status CallMeta::upload(cudaStream_t s) {
  if (used_ == 0) return ok_status();
  return cuda_status(cudaMemcpyAsync(device_, host_, used_, cudaMemcpyHostToDevice, s), "uploading call metadata");
}

StatusOr<uint8_t*> put_call_tables(CallMeta* meta, Arena& scratch, cudaStream_t s, const std::vector<uint8_t>& host,
                                   std::string_view what) {
  if (meta) return meta->put_n(host.data(), host.size(), what);
  DSV4_ASSIGN_OR_RETURN(void* p, arena_alloc(scratch, std::max<size_t>(host.size(), 1), what));
  uint8_t* dev = static_cast<uint8_t*>(p);
  DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(dev, host.data(), host.size(), cudaMemcpyHostToDevice, s),
                                   std::string(what) + " upload"));
  return dev;
}

PinnedBuffer::~PinnedBuffer() {
  if (p_) cudaFreeHost(p_);
}

Status PinnedBuffer::reserve(size_t bytes) {
  if (bytes <= bytes_) return ok_status();
  if (p_) cudaFreeHost(p_);
  p_ = nullptr;
  bytes_ = 0;
  const size_t want = std::max<size_t>(bytes, 1 << 20);
  DSV4_RETURN_IF_ERROR(cuda_status(cudaHostAlloc(&p_, want, cudaHostAllocDefault), "allocating pinned logits"));
  bytes_ = want;
  return ok_status();
}

}  // namespace dsv4::cuda
