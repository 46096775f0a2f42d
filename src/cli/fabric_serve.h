// `dsv4 serve --tp N`: rank processes, their bootstrap and agreement, and the follower ranks' loop.
//
// One host: `dsv4 serve --tp N` is rank 0 (HTTP) and starts ranks 1..N-1 as child processes of the same
// executable with the same flags plus --rank. Several hosts: start one process per rank with
// --tp N --rank R --master-addr HOST0 --master-port P (rank 0 serves HTTP). docs/fabric.md has the flags,
// the protocol and the exit codes.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <sys/types.h>
#include <utility>
#include <vector>

#include "fabric/agreement.h"
#include "fabric/control.h"
#include "fabric/follower.h"
#include "lanes/backend.h"

namespace dsv4::cli {

struct FabricFlags {
  int32_t tp = 1;                        // ranks in all (--tp, --world)
  int32_t rank = -1;                     // -1: rank 0 that starts ranks 1..tp-1 on this host
  std::string master_addr = "127.0.0.1";
  int32_t master_port = 29500;           // 0 with local ranks: pick a free port
  double connect_seconds = 120;
  double timeout_seconds = 4;
  double plan_seconds = 300;
  uint64_t test_refuse_stream = 0;       // FOR TESTS ONLY
};

void add_fabric_flags(CLI::App& app, FabricFlags& flags);

// Local follower processes started by rank 0; reaped in the background (a child that dies ends rank 0
// with the fabric's exit code at once, even before the fabric is up).
class RankLauncher {
 public:
  ~RankLauncher();
  // Starts ranks 1..tp-1 as `exe serve <argv without rank/port flags> --rank R --master-port PORT`.
  static StatusOr<std::unique_ptr<RankLauncher>> start(const FabricFlags& flags, int argc, char** argv,
                                                       uint16_t port);
  // After the clean stop: waits (bounded) for every child; the first non-zero exit code, or 0.
  int wait_all(std::chrono::milliseconds limit);
  void expect_exit() { stopping_ = true; }

 private:
  void monitor();
  std::vector<int> codes();  // a copy of codes_ under the lock
  std::vector<std::pair<int32_t, pid_t>> children_;  // (rank, pid)
  std::vector<int> codes_;                            // -1 while running
  std::atomic<bool> stopping_{false};
  std::atomic<bool> done_{false};
  std::thread monitor_;
  std::mutex mutex_;
};

// Bootstraps this process's rank: rank 0 listens, starts local ranks when --rank is absent, and accepts
// every follower; a follower joins. Errors carry fabric::bootstrap_exit_code.
StatusOr<std::unique_ptr<fabric::Control>> start_fabric(const FabricFlags& flags, int argc, char** argv,
                                                        std::unique_ptr<RankLauncher>* launcher);

// What every rank must agree on: settings, the model's identity (config.json, tensor table and sampled
// bytes of every tensor), the backend's facts, and the build.
fabric::Identity serve_identity(const std::string& model_dir, const lanes::BackendInfo& info,
                                const std::vector<std::pair<std::string, std::string>>& settings);

// A follower rank after load and agreement: runs plans until rank 0 stops; prints its counters; returns
// the exit code.
int run_follower_rank(fabric::Control& control, lanes::Backend& backend, const FabricFlags& flags);

}  // namespace dsv4::cli
