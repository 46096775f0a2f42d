// Fabric control-plane costs on loopback: one plan's round trip (a one-row verify on fake backends) and an
// ordered sum of one 5120-wide row, for 2 and 4 ranks in one process (threads, real TCP sockets).
#include <benchmark/benchmark.h>

#include <thread>

#include "fabric/control.h"
#include "fabric/follower.h"
#include "fabric/leader.h"
#include "lanes/fake_backend.h"

namespace dsv4::fabric {
namespace {

struct Ranks {
  std::vector<std::unique_ptr<Control>> controls;
  explicit Ranks(int32_t world) {
    controls.resize(static_cast<size_t>(world));
    FabricOptions o;
    o.world = world;
    o.master_port = 0;
    o.on_fatal = [](int, const std::string&) {};  // teardown hang-ups are not failures here
    auto rv = Rendezvous::open(o);
    const uint16_t port = rv->port();
    std::vector<std::thread> joiners;
    for (int32_t r = 1; r < world; ++r)
      joiners.emplace_back([&, r] {
        FabricOptions f = o;
        f.rank = r;
        f.master_port = port;
        controls[static_cast<size_t>(r)] = std::move(join_fabric(f)).value();
      });
    controls[0] = std::move(rv->accept_all()).value();
    for (auto& t : joiners) t.join();
  }
};

void BM_PlanRoundTrip(benchmark::State& state) {
  const int32_t world = static_cast<int32_t>(state.range(0));
  Ranks ranks(world);
  std::vector<std::thread> followers;
  for (int32_t r = 1; r < world; ++r)
    followers.emplace_back([&, r] {
      lanes::FakeBackend b(lanes::FakeBackendOptions{});
      run_follower(*ranks.controls[static_cast<size_t>(r)], b);
    });
  lanes::FakeBackend local(lanes::FakeBackendOptions{});
  LeaderBackend leader(*ranks.controls[0], local);
  (void)leader.open(1, lanes::StreamSpec{lanes::SamplingParams{}, 1, 4096});
  std::vector<lanes::TokenId> prompt = {5};
  (void)leader.prefill(std::vector<lanes::Piece>{lanes::Piece{1, 0, prompt}});
  int64_t rows = 1;
  for (auto _ : state) {
    lanes::Window w;
    w.stream = 1;
    w.start = rows;
    w.tokens = {7};
    std::vector<std::vector<lanes::RowResult>> out;
    (void)leader.verify(std::vector<lanes::Window>{w}, &out);
    ++rows;
    if (rows > 4000) {  // stay inside the context: roll back (a keep rides with the next plan)
      (void)leader.keep(1, 1);
      rows = 1;
    }
  }
  (void)leader.stop();
  for (auto& t : followers) t.join();
}
BENCHMARK(BM_PlanRoundTrip)->Arg(2)->Arg(4)->UseRealTime();

void BM_ControlBroadcastAndOrderedSum(benchmark::State& state) {
  const int32_t world = static_cast<int32_t>(state.range(0));
  Ranks ranks(world);
  std::atomic<bool> done{false};
  std::vector<float> row(5120, 1.0f);  // f32 [5120]: one hidden row
  std::vector<std::thread> others;
  std::atomic<int64_t> rounds{0};
  // Followers mirror rank 0's iterations: rank 0 broadcasts whether another round follows.
  for (int32_t r = 1; r < world; ++r)
    others.emplace_back([&, r] {
      std::vector<float> mine(5120, 1.0f);
      for (;;) {
        std::vector<uint8_t> more;
        if (!ranks.controls[static_cast<size_t>(r)]->broadcast(&more).ok() || more.empty() || more[0] == 0) return;
        (void)ranks.controls[static_cast<size_t>(r)]->ordered_sum(mine);
      }
    });
  for (auto _ : state) {
    std::vector<uint8_t> more = {1};
    (void)ranks.controls[0]->broadcast(&more);
    (void)ranks.controls[0]->ordered_sum(row);
  }
  std::vector<uint8_t> stop = {0};
  (void)ranks.controls[0]->broadcast(&stop);
  for (auto& t : others) t.join();
  std::vector<std::thread> byes;
  for (auto& c : ranks.controls) byes.emplace_back([&c] { (void)c->goodbye(); });
  for (auto& t : byes) t.join();
  state.counters["bytes/rank"] = 5120 * 4;
}
BENCHMARK(BM_ControlBroadcastAndOrderedSum)->Arg(2)->Arg(4)->UseRealTime();

}  // namespace
}  // namespace dsv4::fabric

BENCHMARK_MAIN();
