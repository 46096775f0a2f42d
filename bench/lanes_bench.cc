// Lane core overhead per round on the fake backend: wall time per round minus the time spent inside the backend.
#include <benchmark/benchmark.h>

#include <chrono>

#include "lanes/fake_backend.h"
#include "lanes/lane_host.h"

namespace dsv4::lanes {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Forwards every call to the fake backend and adds up the time spent there.
class TimedBackend final : public Backend {
 public:
  explicit TimedBackend(Backend& inner) : inner_(inner) {}
  int64_t backend_ns = 0;

  const BackendInfo& info() const override { return inner_.info(); }
  int64_t stream_bytes(int64_t rows) const override { return inner_.stream_bytes(rows); }
  Status open(StreamId s, const StreamSpec& spec) override { return timed([&] { return inner_.open(s, spec); }); }
  Status prefill(std::span<const Piece> p) override { return timed([&] { return inner_.prefill(p); }); }
  Status verify(std::span<const Window> w, std::vector<std::vector<RowResult>>* out) override {
    return timed([&] { return inner_.verify(w, out); });
  }
  Status keep(StreamId s, int64_t rows) override { return timed([&] { return inner_.keep(s, rows); }); }
  Status draft(std::span<const DraftRequest> r, std::vector<DraftProposal>* out) override {
    return timed([&] { return inner_.draft(r, out); });
  }
  StatusOr<std::vector<uint8_t>> snapshot(StreamId s) override { return inner_.snapshot(s); }
  Status restore(StreamId s, std::span<const uint8_t> b, int64_t rows) override { return inner_.restore(s, b, rows); }
  void release(StreamId s) override { inner_.release(s); }

 private:
  template <typename F>
  Status timed(F&& f) {
    const int64_t start = now_ns();
    Status status = f();
    backend_ns += now_ns() - start;
    return status;
  }
  Backend& inner_;
};

// Args: streams decoding at once, drafts on (1) or off (0). One iteration = one engine round.
void BM_LaneRound(benchmark::State& state) {
  const int32_t streams = static_cast<int32_t>(state.range(0));
  const bool draft = state.range(1) != 0;
  FakeBackendOptions fo;
  fo.max_streams = streams;
  fo.max_context = 1 << 22;
  fo.memory_budget_bytes = int64_t{1} << 40;
  fo.max_verify_rows = 8 * streams;
  FakeBackend fake(fo);
  TimedBackend timed(fake);
  LaneHost host(timed, LaneHostOptions{.max_batch_streams = streams});
  class Null final : public EventSink {
    void on_tokens(RequestId, std::span<const TokenEvent>) override {}
    void on_finish(RequestId, const Finish&) override {}
  };
  auto sink = std::make_shared<Null>();
  for (int32_t i = 0; i < streams; ++i) {
    Request r;
    r.prompt = {1 + i, 2, 3, 4};
    r.sampling.temperature = 0.7f;
    r.max_tokens = 1 << 21;
    r.ignore_eos = true;
    r.draft = draft;
    (void)host.submit(r, sink);
  }
  for (int i = 0; i < 20; ++i) host.step();  // admitted and decoding
  timed.backend_ns = 0;
  const int64_t start = now_ns();
  int64_t rounds = 0;
  for (auto _ : state) {
    host.step();
    ++rounds;
  }
  const int64_t elapsed = now_ns() - start;
  state.counters["round_us"] = static_cast<double>(elapsed) / 1e3 / static_cast<double>(rounds);
  state.counters["backend_us"] = static_cast<double>(timed.backend_ns) / 1e3 / static_cast<double>(rounds);
  state.counters["overhead_us"] =
      static_cast<double>(elapsed - timed.backend_ns) / 1e3 / static_cast<double>(rounds);
  state.counters["tokens_per_round"] = static_cast<double>(host.status().generated_tokens) /
                                       static_cast<double>(host.status().rounds);
}
BENCHMARK(BM_LaneRound)->ArgsProduct({{1, 8, 32}, {0, 1}})->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace dsv4::lanes

BENCHMARK_MAIN();
