// Tests only: the rank-process harness shared by the multi-GPU tests (fabric_nccl_test, tp_forward_test). The
// parent (no CUDA) starts `SELF --rank R --port P --world N --scenario S` per rank on a free loopback port,
// waits for every rank with a deadline (ranks still running then are killed and count as hung), and returns the
// exit codes in rank order; a rank checks that it has its GPU and bootstraps its control channel, and
// counts its failed checks (CHECK_TRUE).
#pragma once

#include <cuda_runtime.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "fabric/control.h"
#include "fabric/socket.h"

extern char** environ;

namespace dsv4::fabric::testing {

// The failed checks of this process; a rank exits 1 when any failed.
inline int& failures() {
  static int n = 0;
  return n;
}

// Prints a failed check (condition and message) and counts it; the test goes on.
#define CHECK_TRUE(cond, ...)                                     \
  do {                                                            \
    if (!(cond)) {                                                \
      std::printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      std::printf(__VA_ARGS__);                                   \
      std::printf("\n");                                          \
      ++::dsv4::fabric::testing::failures();                      \
    }                                                             \
  } while (0)

// What a rank process was started with.
struct RankArgs {
  int rank = -1;  // -1: the parent
  int port = 0;
  int world = 2;
  std::string scenario;
};

inline RankArgs parse_rank_args(int argc, char** argv, int default_world, const std::string& default_scenario) {
  RankArgs a;
  a.world = default_world;
  a.scenario = default_scenario;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--rank") a.rank = std::atoi(argv[i + 1]);
    else if (k == "--port") a.port = std::atoi(argv[i + 1]);
    else if (k == "--scenario") a.scenario = argv[i + 1];
    else if (k == "--world") a.world = std::atoi(argv[i + 1]);
  }
  return a;
}

// Starts `world` rank processes of `self` for `scenario` and waits for them (at most deadline); the exit codes
// in rank order (128 + signal for a killed rank; 1 for one that hung and was killed; empty if none started).
inline std::vector<int> run_ranks(const char* self, int world, const std::string& scenario,
                                  std::chrono::seconds deadline) {
  auto probe = listen_tcp("127.0.0.1", 0, 1);
  if (!probe.ok()) return {};
  const int port = *bound_port(*probe);
  probe->close();
  std::vector<pid_t> pids(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> args = {self,     "--rank",     std::to_string(r), "--port", std::to_string(port),
                                     "--world", std::to_string(world), "--scenario", scenario};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pids[static_cast<size_t>(r)], self, nullptr, nullptr, argv.data(), environ) != 0) return {};
  }
  std::vector<int> codes(static_cast<size_t>(world), -1);
  const auto until = std::chrono::steady_clock::now() + deadline;
  auto running = [&] {
    for (int c : codes)
      if (c < 0) return true;
    return false;
  };
  while (running() && std::chrono::steady_clock::now() < until) {
    for (size_t r = 0; r < codes.size(); ++r) {
      int st = 0;
      if (codes[r] < 0 && waitpid(pids[r], &st, WNOHANG) == pids[r])
        codes[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (size_t r = 0; r < codes.size(); ++r)
    if (codes[r] < 0) {
      std::printf("FAIL scenario %s: rank %zu hung; killed\n", scenario.c_str(), r);
      kill(pids[r], SIGKILL);
      waitpid(pids[r], nullptr, 0);
      codes[r] = 1;
    }
  std::printf("scenario %s, %d ranks: exit codes", scenario.c_str(), world);
  for (int c : codes) std::printf(" %d", c);
  std::printf("\n");
  std::fflush(stdout);
  return codes;
}

// A rank's GPU check: false (and a SKIPPED line) when fewer than `world` devices are visible; else selects
// device `rank`.
inline bool take_rank_device(int rank, int world) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < world) {
    std::printf("SKIPPED: rank %d sees %d CUDA devices; this test needs %d\n", rank, devices, world);
    return false;
  }
  cudaSetDevice(rank);
  return true;
}

// Control-channel options of a test rank on loopback.
inline FabricOptions rank_options(const RankArgs& a, std::chrono::milliseconds peer_timeout,
                                  std::chrono::milliseconds heartbeat) {
  FabricOptions o;
  o.world = a.world;
  o.rank = a.rank;
  o.master_port = static_cast<uint16_t>(a.port);
  o.connect_timeout = std::chrono::seconds(60);
  o.peer_timeout = peer_timeout;
  o.heartbeat_interval = heartbeat;
  return o;
}

}  // namespace dsv4::fabric::testing
