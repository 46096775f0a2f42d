// A second stream on which independent work runs beside a forward's main stream, ordered by two
// events: fork (the side waits for the main stream's work so far) and join (the main stream waits for
// the side's). Used by block_forward (mixes, shared expert) and the attention layers (key path);
// under graph capture the side work becomes a branch of the graph.
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/runtime/check.h"
#include "core/status.h"

namespace dsv4::cuda {

struct SideStream {
  cudaStream_t stream = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
  explicit operator bool() const { return stream != nullptr; }
};

// The side waits for everything enqueued on `main` so far.
inline Status fork_side(const SideStream& s, cudaStream_t main, const char* what) {
  DSV4_RETURN_IF_ERROR(cuda_status(cudaEventRecord(s.fork, main), what));
  return cuda_status(cudaStreamWaitEvent(s.stream, s.fork, 0), what);
}

// Marks the end of the side's work so far (what join_side waits for).
inline Status end_side(const SideStream& s, const char* what) { return cuda_status(cudaEventRecord(s.join, s.stream), what); }

// `main` waits for the side's work up to its last end_side.
inline Status join_side(const SideStream& s, cudaStream_t main, const char* what) {
  return cuda_status(cudaStreamWaitEvent(main, s.join, 0), what);
}

// A forward's own side stream and events (create, then destroy once).
inline Status create_side_stream(SideStream& s) {
  DSV4_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking), "creating the side stream"));
  DSV4_RETURN_IF_ERROR(cuda_status(cudaEventCreateWithFlags(&s.fork, cudaEventDisableTiming), "creating the side events"));
  return cuda_status(cudaEventCreateWithFlags(&s.join, cudaEventDisableTiming), "creating the side events");
}
inline void destroy_side_stream(SideStream& s) {
  if (s.stream) cudaStreamDestroy(s.stream);
  if (s.fork) cudaEventDestroy(s.fork);
  if (s.join) cudaEventDestroy(s.join);
  s = SideStream{};
}

}  // namespace dsv4::cuda
