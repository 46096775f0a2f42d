// The bounded poll loop (see bounded_wait.h).
#include "fabric/bounded_wait.h"

#include <thread>

namespace dsv4::fabric {

Status wait_bounded(const std::function<Poll()>& poll, const std::atomic<bool>& abort,
                    std::chrono::milliseconds limit, const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    const Poll p = poll();
    if (p.state == PollState::done) return ok_status();
    if (p.state == PollState::failed) return error(StatusCode::internal, "{} failed: {}", what, p.error);
    if (abort.load()) return error(StatusCode::unavailable, "{} aborted: the fabric failed", what);
    if (std::chrono::steady_clock::now() > deadline)
      return error(StatusCode::unavailable, "{} did not finish within {} ms", what, limit.count());
    std::this_thread::yield();
  }
}

}  // namespace dsv4::fabric
