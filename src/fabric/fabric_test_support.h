// Test support for the fabric: ranks as threads on loopback with short timeouts and recorded failures.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fabric/control.h"

namespace dsv4::fabric::testing {

// What on_fatal saw on one rank (instead of _exit).
struct Fatal {
  std::mutex mutex;
  int code = -1;
  std::string reason;
  void record(int c, const std::string& r) {
    std::lock_guard lock(mutex);
    if (code < 0) code = c, reason = r;
  }
  int get_code() {
    std::lock_guard lock(mutex);
    return code;
  }
  std::string get_reason() {
    std::lock_guard lock(mutex);
    return reason;
  }
};

inline FabricOptions test_options(int32_t world, int32_t rank, uint16_t port, Fatal* fatal) {
  FabricOptions o;
  o.world = world;
  o.rank = rank;
  o.master_port = port;
  o.connect_timeout = std::chrono::milliseconds(5000);
  o.heartbeat_interval = std::chrono::milliseconds(50);
  o.peer_timeout = std::chrono::milliseconds(800);
  o.plan_timeout = std::chrono::milliseconds(1500);
  o.on_fatal = [fatal](int c, const std::string& r) { fatal->record(c, r); };
  return o;
}

// Bootstraps `world` ranks in threads; controls[r] is rank r's.
struct Fabric {
  std::vector<std::unique_ptr<Fatal>> fatals;       // outlive the controls that report into them
  std::vector<std::unique_ptr<Control>> controls;
};

inline Fabric make_fabric(int32_t world) {
  Fabric f;
  f.controls.resize(static_cast<size_t>(world));
  for (int32_t r = 0; r < world; ++r) f.fatals.push_back(std::make_unique<Fatal>());
  auto rv = Rendezvous::open(test_options(world, 0, 0, f.fatals[0].get()));
  if (!rv.ok()) return f;
  const uint16_t port = rv->port();
  std::vector<std::thread> joiners;
  for (int32_t r = 1; r < world; ++r) {
    joiners.emplace_back([&, r] {
      auto c = join_fabric(test_options(world, r, port, f.fatals[static_cast<size_t>(r)].get()));
      if (c.ok()) f.controls[static_cast<size_t>(r)] = std::move(c).value();
    });
  }
  auto c0 = rv->accept_all();
  if (c0.ok()) f.controls[0] = std::move(c0).value();
  for (auto& t : joiners) t.join();
  return f;
}

// Runs fn(rank) on every rank at once and waits for all.
inline void on_all_ranks(int32_t world, const std::function<void(int32_t)>& fn) {
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < world; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

}  // namespace dsv4::fabric::testing
