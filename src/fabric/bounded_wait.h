// A bounded poll loop: wait for a device or library operation that reports progress by polling, never forever.
//
// NcclComm::wait is this loop over cudaStreamQuery and ncclCommGetAsyncError; keeping the loop here lets it be
// tested without a GPU (a wedged peer = a poll that never finishes, a lost peer = the abort flag).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>

#include "core/status.h"

namespace dsv4::fabric {

enum class PollState { pending, done, failed };

struct Poll {
  PollState state = PollState::pending;
  std::string error;  // when failed
};

// Polls until done (ok), failed (internal, the poll's error), `abort` set (unavailable "aborted: ..."), or
// `limit` passed (unavailable "did not finish within ..."). Spins with yields: the operations it waits for
// last microseconds, and a sleep would add tens of them to each.
Status wait_bounded(const std::function<Poll()>& poll, const std::atomic<bool>& abort,
                    std::chrono::milliseconds limit, const char* what);

}  // namespace dsv4::fabric
