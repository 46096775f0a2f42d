// The clock the lane core reads for deadlines: steady time in production, a manual one in tests.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace dsv4::lanes {

class Clock {
 public:
  virtual ~Clock() = default;
  // Nanoseconds since an arbitrary fixed origin; never decreases.
  virtual int64_t now_ns() const = 0;
};

class SteadyClock final : public Clock {
 public:
  int64_t now_ns() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

// Time moves only when a test (or the fake backend's cost model) advances it.
class ManualClock final : public Clock {
 public:
  int64_t now_ns() const override { return now_.load(); }
  void advance_ns(int64_t ns) { now_.fetch_add(ns); }

 private:
  std::atomic<int64_t> now_{0};
};

}  // namespace dsv4::lanes
