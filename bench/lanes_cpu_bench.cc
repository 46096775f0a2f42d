// The lane core on the CPU oracle (tiny preset): DSpark acceptance and tokens per verify; cached vs fresh prompts.
#include <benchmark/benchmark.h>

#include "backends/cpu/load.h"
#include "backends/cpu/synthetic.h"
#include "backends/cpu/lane_backend.h"
#include "family/deepseek_v41/preset.h"
#include "lanes/lane_host.h"

namespace dsv4 {
namespace {

std::shared_ptr<const cpu::ModelWeights> tiny_weights() {
  static std::shared_ptr<const cpu::ModelWeights> weights = cpu::synthetic_weights(
      cpu::model_config_from(family::preset_config(family::Preset::tiny, family::Variant::v41)), 7, true);
  return weights;
}

std::unique_ptr<cpu::CpuLaneBackend> make_backend() {
  cpu::LaneBackendOptions options;
  options.model_id = "tiny-synthetic-seed-7";
  options.max_context = 1 << 14;
  return std::move(cpu::CpuLaneBackend::create(tiny_weights(), cpu::OracleOptions{}, options)).value();
}

std::vector<lanes::TokenId> prompt_of(int64_t length, uint64_t salt) {
  std::vector<lanes::TokenId> out;
  for (int64_t i = 0; i < length; ++i) out.push_back(2 + static_cast<lanes::TokenId>(lanes::splitmix64_nth(salt, i + 1) % 5000));
  return out;
}

class Usage final : public lanes::EventSink {
 public:
  void on_tokens(lanes::RequestId, std::span<const lanes::TokenEvent>) override {}
  void on_finish(lanes::RequestId, const lanes::Finish& f) override { usage.push_back(f.usage); }
  std::vector<lanes::Usage> usage;
};

// Arg: 0 greedy, 1 sampled (T = 0.9). Eight 64-token replies to different 40-token prompts, drafts on.
void BM_CpuDraftAcceptance(benchmark::State& state) {
  for (auto _ : state) {
    auto backend = make_backend();
    lanes::LaneHost host(*backend, {});
    auto sink = std::make_shared<Usage>();
    for (uint64_t i = 0; i < 8; ++i) {
      lanes::Request r;
      r.prompt = prompt_of(40, i);
      if (state.range(0) == 1) r.sampling.temperature = 0.9f;
      r.max_tokens = 64;
      r.ignore_eos = true;
      (void)host.submit(r, sink);
    }
    host.run_until_idle();
    int64_t drafted = 0, accepted = 0, rounds = 0, tokens = 0;
    for (const lanes::Usage& u : sink->usage) {
      drafted += u.drafted_tokens;
      accepted += u.accepted_tokens;
      rounds += u.verify_rounds;
      tokens += u.completion_tokens;
    }
    state.counters["drafted"] = static_cast<double>(drafted);
    state.counters["acceptance"] = drafted ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0;
    state.counters["tokens_per_verify"] = static_cast<double>(tokens) / static_cast<double>(rounds);
  }
}
BENCHMARK(BM_CpuDraftAcceptance)->Arg(0)->Arg(1)->Iterations(1)->Unit(benchmark::kMillisecond);

// Arg: prompt length. Time to the first token of a fresh prompt vs one resumed from a RAM cache entry
// (page 256: the entry covers all but the last < 256 rows).
void BM_CpuPromptFirstToken(benchmark::State& state, bool cached) {
  const int64_t length = state.range(0);
  auto backend = make_backend();
  auto cache = std::move(cache::PromptCache::open({.page_tokens = 256, .ram_bytes = int64_t{8} << 30,
                                                   .model_id = "tiny-synthetic-seed-7", .snapshot_version = 1}))
                   .value();
  lanes::LaneHost host(*backend, lanes::LaneHostOptions{.prefill_rows = 256, .cache = cached ? cache.get() : nullptr});
  auto sink = std::make_shared<Usage>();
  lanes::Request r;
  r.prompt = prompt_of(length, 99);
  r.max_tokens = 1;
  r.draft = false;
  if (cached) {
    (void)host.submit(r, sink);  // fills the cache
    host.run_until_idle();
  }
  for (auto _ : state) {
    (void)host.submit(r, sink);
    host.run_until_idle();
  }
  state.counters["cached_rows"] = static_cast<double>(sink->usage.back().cached_prompt_tokens);
}
BENCHMARK_CAPTURE(BM_CpuPromptFirstToken, fresh, false)->Arg(2048)->Iterations(2)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_CpuPromptFirstToken, cached, true)->Arg(2048)->Iterations(2)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace dsv4

BENCHMARK_MAIN();
