// An NCCL communicator over the fabric: created with the control channel, rank-ordered reductions, bounded waits.
//
// create(): every rank's NCCL version must match (else every rank ends with kExitAgreement); rank 0's
// ncclUniqueId is broadcast over the control channel; ncclCommInitRank on `device` with every peer connected
// at init (NCCL_RUNTIME_CONNECT=0 unless the environment says otherwise, set before any NCCL call) and a
// warm-up of each kind of collective, so no later collective blocks the host on a connection. ordered_all_reduce() is ncclAllGather then one kernel that
// sums the world's contributions in rank order, so every rank holds bit-identical sums that equal a host loop
// r0 + r1 + ... in float, whatever order data arrives in (a plain ncclAllReduce's order depends on the
// algorithm and topology NCCL picks).
//
// Never a hang: wait() polls the stream and NCCL's async error until a deadline (bounded_wait.h) and aborts
// the communicator (on a detached thread) when the fabric's abort hook fired or the deadline passed. A lost rank is caught by
// the control channel, whose failure ends the process (control.h) whatever the device is doing.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <memory>

#include "core/status.h"
#include "fabric/control.h"

namespace dsv4::fabric {

class NcclComm {
 public:
  static StatusOr<std::unique_ptr<NcclComm>> create(Control& control, int device);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int32_t rank() const { return rank_; }
  int32_t world() const { return world_; }
  ncclComm_t comm() const { return comm_; }

  // values (device f32 [count]) <- sum over ranks in rank order. scratch: device f32 [world * count].
  // Enqueued on `stream`; call wait() before reading.
  Status ordered_all_reduce(float* values, int64_t count, float* scratch, cudaStream_t stream);
  // ncclAllReduce(sum) for comparison and timing (its summation order is NCCL's).
  Status plain_all_reduce(float* values, int64_t count, cudaStream_t stream);
  // Waits for `stream` to finish, at most `limit`; a failure or a requested abort aborts the communicator.
  Status wait(cudaStream_t stream, std::chrono::milliseconds limit);
  // Asks the owner's wait() to abort (safe from any thread: the fabric's abort hook sets the same flag, and
  // keeps it alive after this communicator is gone).
  void request_abort() { *abort_requested_ = true; }
  bool aborted() const { return aborted_; }
  // True once ncclCommAbort has returned on its thread (for logs and tests).
  bool abort_finished() const { return abort_finished_->load(); }

 private:
  NcclComm() = default;
  // Aborts on a detached thread (ncclCommAbort may wait on a dead peer's transport) and returns at once;
  // the communicator is not touched again.
  Status abort_now(std::string why);

  ncclComm_t comm_ = nullptr;
  int32_t rank_ = 0, world_ = 1;
  bool aborted_ = false;
  std::shared_ptr<std::atomic<bool>> abort_requested_ = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<std::atomic<bool>> abort_finished_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace dsv4::fabric
