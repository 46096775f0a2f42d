// GPU test of the NCCL communicator on 2 GPUs: two rank processes bootstrap over the control channel, check the
// rank-ordered all-reduce bit for bit against a host loop, time it against ncclAllReduce, and check that a
// rank dying mid-collective ends the survivor within seconds with exit code 70 instead of hanging.
//
// Run without arguments: the parent (no CUDA) starts `--rank 0` and `--rank 1` per scenario and combines their
// exit codes: 0 pass, 1 fail, 77 skipped (fewer than 2 GPUs).
#include <cuda_runtime.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fabric/control.h"
#include "fabric/nccl/nccl_comm.h"
#include "fabric/nccl/ordered_sum.cuh"
#include "fabric/nccl/rank_process_testing.h"

namespace dsv4::fabric {
namespace {

using testing::failures;

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Rank r's contribution at i: magnitudes from 1e-3 to 1e8 so rounding matters (deterministic, no RNG state).
float contribution(int r, int64_t i) {
  const uint64_t h = (static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(r + 1) << 40);
  const float mant = static_cast<float>((h >> 20) % 100000) / 1000.0f - 50.0f;
  const int e = static_cast<int>((h >> 8) % 12) - 3;
  return mant * std::pow(10.0f, static_cast<float>(e));
}

void test_kernel_order() {
  // 4 contributions 1e8, 1, -1e8, 1: in float, 1e8 + 1 rounds to 1e8 (float spacing at 1e8 is 8), so the
  // rank order gives ((1e8 + 1) - 1e8) + 1 = 1 exactly; other orders give 0 or 2.
  const int64_t n = 1000;
  std::vector<float> g(4 * n);
  const float c[4] = {1e8f, 1.0f, -1e8f, 1.0f};
  for (int r = 0; r < 4; ++r)
    for (int64_t i = 0; i < n; ++i) g[r * n + i] = c[r];
  float *dg = nullptr, *dout = nullptr;
  cudaMalloc(&dg, g.size() * 4);
  cudaMalloc(&dout, n * 4);
  cudaMemcpy(dg, g.data(), g.size() * 4, cudaMemcpyHostToDevice);
  CHECK_TRUE(ordered_sum_f32(dg, 4, n, dout, nullptr) == cudaSuccess, "launch");
  std::vector<float> out(n);
  cudaMemcpy(out.data(), dout, n * 4, cudaMemcpyDeviceToHost);
  int bad = 0;
  for (float v : out) bad += v != 1.0f;
  CHECK_TRUE(bad == 0, "%d of %lld elements differ from 1.0", bad, static_cast<long long>(n));
  std::printf("ordered_sum kernel, 4 contributions {1e8, 1, -1e8, 1}: every element == 1.0: %s\n", bad ? "FAIL" : "PASS");
  cudaFree(dg);
  cudaFree(dout);
}

int run_reduce(Control& control) {
  const int rank = control.rank();
  auto comm = NcclComm::create(control, rank);
  if (!comm.ok()) {
    std::printf("FAIL rank %d: %s\n", rank, comm.status().to_string().c_str());
    return 1;
  }
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  if (rank == 0) test_kernel_order();
  // Bit-exact ordered all-reduce against the host loop x0 + x1.
  const int64_t n = 5120 * 3 + 7;
  std::vector<float> mine(n), expect(n);
  for (int64_t i = 0; i < n; ++i) {
    mine[i] = contribution(rank, i);
    expect[i] = contribution(0, i);
    for (int r = 1; r < control.world(); ++r) expect[i] += contribution(r, i);
  }
  float *dv = nullptr, *ds = nullptr, *dp = nullptr;
  const int64_t max_n = 129280 * 8;
  cudaMalloc(&dv, max_n * 4);
  cudaMalloc(&dp, max_n * 4);
  cudaMalloc(&ds, max_n * 4 * control.world());
  cudaMemcpy(dv, mine.data(), n * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dp, mine.data(), n * 4, cudaMemcpyHostToDevice);
  Status s = (*comm)->ordered_all_reduce(dv, n, ds, stream);
  if (s.ok()) s = (*comm)->plain_all_reduce(dp, n, stream);
  if (s.ok()) s = (*comm)->wait(stream, std::chrono::seconds(30));
  CHECK_TRUE(s.ok(), "%s", s.to_string().c_str());
  std::vector<float> got(n), plain(n);
  cudaMemcpy(got.data(), dv, n * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(plain.data(), dp, n * 4, cudaMemcpyDeviceToHost);
  int64_t bad = 0, plain_diff = 0;
  for (int64_t i = 0; i < n; ++i) {
    bad += bits(got[i]) != bits(expect[i]);
    plain_diff += bits(plain[i]) != bits(expect[i]);
  }
  CHECK_TRUE(bad == 0, "rank %d: %lld of %lld elements differ from the host rank-order sum", rank,
             static_cast<long long>(bad), static_cast<long long>(n));
  std::printf("rank %d: ordered all-reduce of %lld floats: bit-exact vs host r0+r1: %s (ncclAllReduce differs in %lld)\n",
              rank, static_cast<long long>(n), bad ? "FAIL" : "PASS", static_cast<long long>(plain_diff));
  // Every rank holds the same bits.
  std::vector<uint8_t> digest(8);
  uint64_t h = 0;
  for (float v : got) h = (h ^ bits(v)) * 0x100000001B3ull;
  std::memcpy(digest.data(), &h, 8);
  auto all = control.all_gather(digest);
  CHECK_TRUE(all.ok() && (*all)[0] == (*all)[1], "ranks hold different sums");

  // Timing: decode-size exchanges (one 5120-wide row, 8 rows, 64 rows) and one head row (129280 logits).
  if (rank == 0) std::printf("%-26s %14s %14s\n", "floats per rank", "ordered (us)", "ncclAllReduce (us)");
  for (int64_t count : {int64_t{5120}, int64_t{5120 * 8}, int64_t{5120 * 64}, int64_t{129280}, int64_t{129280 * 8}}) {
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    float t_ordered = 0, t_plain = 0;
    for (int kind = 0; kind < 2; ++kind) {
      for (int i = 0; i < 20; ++i)
        (void)(kind == 0 ? (*comm)->ordered_all_reduce(dv, count, ds, stream) : (*comm)->plain_all_reduce(dp, count, stream));
      cudaEventRecord(a, stream);
      const int iters = 200;
      for (int i = 0; i < iters; ++i)
        (void)(kind == 0 ? (*comm)->ordered_all_reduce(dv, count, ds, stream) : (*comm)->plain_all_reduce(dp, count, stream));
      cudaEventRecord(b, stream);
      Status w = (*comm)->wait(stream, std::chrono::seconds(60));
      CHECK_TRUE(w.ok(), "%s", w.to_string().c_str());
      float ms = 0;
      cudaEventElapsedTime(&ms, a, b);
      (kind == 0 ? t_ordered : t_plain) = ms * 1000.0f / iters;
    }
    if (rank == 0) std::printf("%-26lld %14.1f %14.1f\n", static_cast<long long>(count), t_ordered, t_plain);
  }
  cudaFree(dv);
  cudaFree(dp);
  cudaFree(ds);
  comm->reset();
  return failures() == 0 ? 0 : 1;
}

// Rank 1 dies after the communicator is up; rank 0 is inside a collective that can never finish. As in
// serving, the fabric's failure ends rank 0's process (on_fatal below exits with the fabric's code): the check
// is that this happens within seconds although the device is stuck waiting for a dead peer.
std::chrono::steady_clock::time_point kill_t0;

int run_kill(Control& control) {
  const int rank = control.rank();
  auto comm = NcclComm::create(control, rank);
  if (!comm.ok()) {
    std::printf("FAIL rank %d: %s\n", rank, comm.status().to_string().c_str());
    return 1;
  }
  if (rank == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::fflush(stdout);
    _exit(9);  // no fail frame, no goodbye: as kill -9 would
  }
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  float *dv = nullptr, *ds = nullptr;
  cudaMalloc(&dv, 5120 * 4);
  cudaMalloc(&ds, 5120 * 4 * 2);
  kill_t0 = std::chrono::steady_clock::now();
  Status s = (*comm)->ordered_all_reduce(dv, 5120, ds, stream);
  std::printf("rank 0: collective enqueued (%s) after %.3f s\n", s.ok() ? "ok" : s.to_string().c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - kill_t0).count());
  if (s.ok()) s = (*comm)->wait(stream, std::chrono::seconds(30));
  std::printf("rank 0: the wait returned after %.3f s: %s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - kill_t0).count(),
              s.ok() ? "ok (FAIL: rank 1 is gone)" : s.to_string().c_str());
  // The fabric's failure exits this process with code 70 (on_fatal); reaching the end of this sleep is a failure.
  std::this_thread::sleep_for(std::chrono::seconds(5));
  std::printf("FAIL rank 0: still running 5 s after the wait returned\n");
  std::fflush(stdout);
  _exit(1);
}

// Rank 1 stays alive (heartbeats) but never joins one collective: a wedged peer. Rank 0's bounded wait must
// end at its deadline and abort the communicator; then both ranks close cleanly over the control channel.
int run_stall(Control& control) {
  const int rank = control.rank();
  auto comm = NcclComm::create(control, rank);
  if (!comm.ok()) {
    std::printf("FAIL rank %d: %s\n", rank, comm.status().to_string().c_str());
    return 1;
  }
  if (rank == 0) {
    cudaStream_t stream;
    cudaStreamCreate(&stream);
    float *dv = nullptr, *ds = nullptr;
    cudaMalloc(&dv, 5120 * 4);
    cudaMalloc(&ds, 5120 * 4 * 2);
    const auto t0 = std::chrono::steady_clock::now();
    Status s = (*comm)->ordered_all_reduce(dv, 5120, ds, stream);
    if (s.ok()) s = (*comm)->wait(stream, std::chrono::seconds(2));
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK_TRUE(!s.ok(), "the collective finished without rank 1");
    CHECK_TRUE(waited >= 1.9 && waited < 4.0, "the wait took %.2f s (limit 2 s)", waited);
    std::printf("rank 0: a wedged peer: the wait ended after %.2f s: '%s': %s\n", waited, s.message().c_str(),
                failures() ? "FAIL" : "PASS");
  }
  // Barrier (bounded by liveness), then a clean close.
  auto all = control.all_gather({});
  Status bye = all.ok() ? control.goodbye() : all.status();
  CHECK_TRUE(bye.ok(), "rank %d: %s", rank, bye.to_string().c_str());
  std::printf("rank %d: closed cleanly after the stall: %s\n", rank, bye.ok() ? "PASS" : "FAIL");
  std::fflush(stdout);
  _exit(failures() == 0 ? 0 : 1);  // the aborted communicator is left to its abort thread
}

int run_rank(const testing::RankArgs& a) {
  const int rank = a.rank;
  const std::string& scenario = a.scenario;
  if (!testing::take_rank_device(rank, 2)) return 77;
  std::atomic<int> fatal_code{-1};
  FabricOptions o = testing::rank_options(a, std::chrono::seconds(2), std::chrono::milliseconds(100));
  o.connect_timeout = std::chrono::seconds(30);
  if (scenario == "kill") {
    o.on_fatal = [](int code, const std::string& why) {
      std::printf("rank 0: the fabric failed %.3f s after the collective began (rank 1 died at ~0.3 s): exit %d\n",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - kill_t0).count(), code);
      std::fflush(stdout);
      _exit(code);
    };
  } else {
    o.on_fatal = [&fatal_code](int code, const std::string& why) {
      int none = -1;
      fatal_code.compare_exchange_strong(none, code);
    };
  }
  auto control = bootstrap(o);
  if (!control.ok()) {
    std::printf("FAIL rank %d: bootstrap: %s\n", rank, control.status().to_string().c_str());
    return 1;
  }
  const int code = scenario == "kill"    ? run_kill(**control)
                   : scenario == "stall" ? run_stall(**control)
                                         : run_reduce(**control);
  if (scenario == "reduce") {
    // A clean end: both ranks say goodbye, so neither counts the other's hang-up as a failure.
    Status bye = (*control)->goodbye();
    if (!bye.ok() || fatal_code.load() >= 0) {
      std::printf("FAIL rank %d: unclean close: %s (fabric code %d)\n", rank, bye.to_string().c_str(), fatal_code.load());
      return 1;
    }
  }
  return code;
}

int run_parent(const char* self) {
  int overall = 0;
  for (const std::string scenario : {"reduce", "stall", "kill"}) {
    const std::vector<int> codes = testing::run_ranks(self, 2, scenario, std::chrono::seconds(scenario == "kill" ? 40 : 100));
    if (codes.size() != 2) return 1;
    if (codes[0] == 77 && codes[1] == 77) return 77;
    const bool pass = scenario == "kill" ? codes[0] == kExitPeerLost && codes[1] == 9 : codes[0] == 0 && codes[1] == 0;
    if (!pass) overall = 1;
  }
  std::printf("%s\n", overall == 0 ? "ALL PASSED" : "FAILED");
  return overall;
}

}  // namespace
}  // namespace dsv4::fabric

int main(int argc, char** argv) {
  const dsv4::fabric::testing::RankArgs a = dsv4::fabric::testing::parse_rank_args(argc, argv, 2, "reduce");
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (a.rank < 0) return dsv4::fabric::run_parent("/proc/self/exe");
  return dsv4::fabric::run_rank(a);
}
