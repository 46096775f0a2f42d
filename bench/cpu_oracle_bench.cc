// CPU oracle throughput: greedy decode tokens/s and prefill rows/s on the tiny preset (random
// weights in checkpoint formats), ref32, at 1 and 2 threads. Results: docs/perf.md "CPU oracle".
#include <benchmark/benchmark.h>

#include "backends/cpu/forward.h"
#include "family/deepseek_v41/synthetic_weights.h"
#include "family/deepseek_v41/preset.h"

namespace {

std::shared_ptr<const dsv4::family::Model> tiny() {
  static auto w = dsv4::family::synthetic_weights(dsv4::family::preset_config(dsv4::family::Preset::tiny, dsv4::family::Variant::v41),
      1, true);
  return w;
}

std::vector<int32_t> prompt(int n) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 7919 + 13) % 129280;
  return t;
}

// One iteration = one decoded token (a one-row forward with its logits) after a 64-token prompt.
void BM_TinyDecode(benchmark::State& state) {
  dsv4::cpu::OracleOptions o;
  o.threads = static_cast<int>(state.range(0));
  auto oracle = std::move(dsv4::cpu::Oracle::create(tiny(), o)).value();
  int32_t s = oracle->open_stream();
  (void)oracle->forward({{s, prompt(64), {}}});
  int32_t next = 17;
  for (auto _ : state) {
    auto r = oracle->forward({{s, {next}, {0}}});
    next = static_cast<int32_t>((next * 31 + 7) % 129280);
    benchmark::DoNotOptimize(r);
    if (*oracle->length(s) >= 64 + 100) {  // keep the context length bounded
      state.PauseTiming();
      (void)oracle->truncate(s, 64);
      state.ResumeTiming();
    }
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_TinyDecode)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// One iteration = a 128-token prompt fed to a fresh stream (last row's logits).
void BM_TinyPrefill128(benchmark::State& state) {
  dsv4::cpu::OracleOptions o;
  o.threads = static_cast<int>(state.range(0));
  o.max_rollback = 0;
  auto oracle = std::move(dsv4::cpu::Oracle::create(tiny(), o)).value();
  const auto p = prompt(128);
  for (auto _ : state) {
    int32_t s = oracle->open_stream();
    auto r = oracle->forward({{s, p, {127}}});
    benchmark::DoNotOptimize(r);
    (void)oracle->close_stream(s);
  }
  state.counters["rows/s"] = benchmark::Counter(128.0 * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_TinyPrefill128)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
