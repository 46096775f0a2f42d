// Stream and Event creation and their checked operations.
#include "backends/cuda/runtime/stream.h"

#include "backends/cuda/runtime/check.h"

namespace dsv4::cuda {

StatusOr<Stream> Stream::create() {
  Stream st;
  DSV4_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&st.s_, cudaStreamNonBlocking), "cudaStreamCreate"));
  return st;
}

Status Stream::synchronize(std::string_view what) const {
  return cuda_status(cudaStreamSynchronize(s_), fmt::format("cudaStreamSynchronize after {}", what));
}

StatusOr<Event> Event::create(bool timing) {
  Event ev;
  DSV4_RETURN_IF_ERROR(cuda_status(cudaEventCreateWithFlags(&ev.e_, timing ? cudaEventDefault : cudaEventDisableTiming),
                                   "cudaEventCreate"));
  return ev;
}

Status Event::record(cudaStream_t s) const { return cuda_status(cudaEventRecord(e_, s), "cudaEventRecord"); }

Status Event::wait_on(cudaStream_t s) const {
  return cuda_status(cudaStreamWaitEvent(s, e_, 0), "cudaStreamWaitEvent");
}

StatusOr<float> Event::elapsed_ms_since(const Event& start) const {
  float ms = 0;
  DSV4_RETURN_IF_ERROR(cuda_status(cudaEventElapsedTime(&ms, start.e_, e_), "cudaEventElapsedTime"));
  return ms;
}

}  // namespace dsv4::cuda
