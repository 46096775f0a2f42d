// The bounded poll loop behind NcclComm::wait: a wedged operation ends at the deadline, a failed fabric ends it
// at once, errors and completions are reported as they come.
#include <gtest/gtest.h>

#include <thread>

#include "fabric/bounded_wait.h"

namespace dsv4::fabric {
namespace {
using namespace std::chrono_literals;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(BoundedWait, AWedgedOperationEndsAtTheDeadline) {
  std::atomic<bool> abort{false};
  const auto t0 = std::chrono::steady_clock::now();
  Status s = wait_bounded([] { return Poll{}; }, abort, 300ms, "all-gather");
  const double waited = seconds_since(t0);
  EXPECT_EQ(s.code(), StatusCode::unavailable);
  EXPECT_EQ(s.message(), "all-gather did not finish within 300 ms");
  EXPECT_GE(waited, 0.3);
  EXPECT_LT(waited, 1.5);
}

TEST(BoundedWait, TheAbortFlagEndsItAtOnce) {
  std::atomic<bool> abort{false};
  std::thread hook([&] {
    std::this_thread::sleep_for(100ms);
    abort = true;  // what the fabric's abort hook does when a peer is lost
  });
  const auto t0 = std::chrono::steady_clock::now();
  Status s = wait_bounded([] { return Poll{}; }, abort, 30000ms, "all-gather");
  const double waited = seconds_since(t0);
  hook.join();
  EXPECT_EQ(s.message(), "all-gather aborted: the fabric failed");
  EXPECT_LT(waited, 2.0);
}

TEST(BoundedWait, ReportsDoneAndFailedAsTheyCome) {
  std::atomic<bool> abort{false};
  int calls = 0;
  EXPECT_TRUE(wait_bounded([&] { return Poll{++calls < 5 ? PollState::pending : PollState::done, ""}; }, abort, 5000ms,
                           "x")
                  .ok());
  EXPECT_EQ(calls, 5);
  Status f = wait_bounded([] { return Poll{PollState::failed, "remote error"}; }, abort, 5000ms, "all-reduce");
  EXPECT_EQ(f.code(), StatusCode::internal);
  EXPECT_EQ(f.message(), "all-reduce failed: remote error");
}

}  // namespace
}  // namespace dsv4::fabric
