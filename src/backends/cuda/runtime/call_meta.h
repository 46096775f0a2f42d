// CallMeta: a call's host-built metadata (token ids, positions, Engram table rows, attention piece
// tables, logit rows) laid out in a pinned host image and sent to a device buffer of fixed address
// with one asynchronous copy, so the call's launches (eager or a replayed graph) read it there.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace dsv4::cuda {

class Arena;  // arena.h

// Not thread-safe. The host image must not be rewritten before the upload has completed (the
// forward synchronizes at the end of every call, before the next begin()).
class CallMeta {
 public:
  CallMeta() = default;
  ~CallMeta();
  CallMeta(const CallMeta&) = delete;
  CallMeta& operator=(const CallMeta&) = delete;

  // Starts a call's image needing at most `bytes` (with 256-byte alignment of every part); grows
  // the buffers when they are smaller, which moves them: *moved tells the caller that device
  // addresses taken before (captured graphs) are stale.
  Status begin(size_t bytes, bool* moved);
  // Copies n bytes into the image (256-aligned); returns the device address they have once
  // upload() has run.
  StatusOr<void*> put(const void* src, size_t n, std::string_view what);
  template <typename T>
  StatusOr<T*> put_n(const T* src, size_t count, std::string_view what) {
    DSV4_ASSIGN_OR_RETURN(void* p, put(src, count * sizeof(T), what));
    return static_cast<T*>(p);
  }
  // Enqueues the copy of the image's used part to the device on `s`.
  Status upload(cudaStream_t s);
  size_t used() const { return used_; }
  // Bytes the image takes for parts of these sizes (each rounded up to 256).
  static size_t padded(size_t n) { return (n + 255) / 256 * 256; }

 private:
  void release();
  void* host_ = nullptr;    // pinned
  void* device_ = nullptr;
  size_t capacity_ = 0, used_ = 0;
};

// The device address of a call's host-built tables `host`: staged into `meta` when set (they reach
// the device with the call's metadata upload), else taken from `scratch` (256-aligned) and copied
// now on `s` (then `host` must stay unchanged until that copy has run). `what` names them in errors.
StatusOr<uint8_t*> put_call_tables(CallMeta* meta, Arena& scratch, cudaStream_t s, const std::vector<uint8_t>& host,
                                   std::string_view what);

// A pinned host buffer that only grows (the logits of a call come back into it).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  Status reserve(size_t bytes);
  void* data() const { return p_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace dsv4::cuda
