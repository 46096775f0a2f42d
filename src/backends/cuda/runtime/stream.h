// Owning wrappers of CUDA streams and events (created non-blocking / timing-capable, destroyed once).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "core/status.h"

namespace dsv4::cuda {

class Stream {
 public:
  Stream() = default;
  // A stream that does not synchronize with the legacy default stream.
  static StatusOr<Stream> create();
  ~Stream() { if (s_) cudaStreamDestroy(s_); }
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept { std::swap(s_, o.s_); return *this; }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }
  Status synchronize(std::string_view what) const;

 private:
  cudaStream_t s_ = nullptr;
};

class Event {
 public:
  Event() = default;
  // timing = false: a cheaper event for ordering only.
  static StatusOr<Event> create(bool timing = true);
  ~Event() { if (e_) cudaEventDestroy(e_); }
  Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  Event& operator=(Event&& o) noexcept { std::swap(e_, o.e_); return *this; }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return e_; }
  Status record(cudaStream_t s) const;
  // Makes `s` wait for this event's last record.
  Status wait_on(cudaStream_t s) const;
  // Milliseconds from `start` to this event (both recorded and complete).
  StatusOr<float> elapsed_ms_since(const Event& start) const;

 private:
  cudaEvent_t e_ = nullptr;
};

}  // namespace dsv4::cuda
