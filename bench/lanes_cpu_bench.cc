// The lane core on the CPU oracle (tiny preset): DSpark acceptance and tokens per verify; cached vs fresh prompts.
#include <benchmark/benchmark.h>

#include "family/deepseek_v41/layer_plan.h"
#include "family/deepseek_v41/synthetic_weights.h"
#include "backends/cpu/oracle_forward.h"
#include "family/deepseek_v41/preset.h"
#include "lanes/lane_host.h"

namespace dsv4 {
namespace {

std::shared_ptr<const family::Model> tiny_weights() {
  static std::shared_ptr<const family::Model> weights = family::synthetic_weights(family::preset_config(family::Preset::tiny, family::Variant::v41), 7, true);
  return weights;
}

std::unique_ptr<engine::LaneBackend> make_backend() {
  engine::LaneBackendOptions options;
  options.model_id = "tiny-synthetic-seed-7";
  options.max_context = 1 << 14;
  return std::move(cpu::oracle_lane_backend(tiny_weights(), cpu::OracleOptions{}, options)).value();
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

// The same backend offering whole snapshots only (no row tables): the prompt cache as it was before row pages.
class WholeSnapshots final : public lanes::Backend {
 public:
  explicit WholeSnapshots(lanes::Backend& inner) : inner_(inner), info_(inner.info()) { info_.row_tables.clear(); }
  const lanes::BackendInfo& info() const override { return info_; }
  int64_t stream_bytes(int64_t rows) const override { return inner_.stream_bytes(rows); }
  Status open(lanes::StreamId s, const lanes::StreamSpec& spec) override { return inner_.open(s, spec); }
  Status prefill(std::span<const lanes::Piece> pieces) override { return inner_.prefill(pieces); }
  Status verify(std::span<const lanes::Window> w, std::vector<std::vector<lanes::RowResult>>* out) override {
    return inner_.verify(w, out);
  }
  Status keep(lanes::StreamId s, int64_t rows) override { return inner_.keep(s, rows); }
  Status draft(std::span<const lanes::DraftRequest> r, std::vector<lanes::DraftProposal>* out) override {
    return inner_.draft(r, out);
  }
  StatusOr<std::vector<uint8_t>> snapshot(lanes::StreamId s) override { return inner_.snapshot(s); }
  Status restore(lanes::StreamId s, std::span<const uint8_t> b, int64_t rows) override {
    return inner_.restore(s, b, rows);
  }
  void release(lanes::StreamId s) override { inner_.release(s); }

 private:
  lanes::Backend& inner_;
  lanes::BackendInfo info_;
};

enum class Cache { none, whole, split };

// Arg: prompt length. Time to the first token of a fresh prompt vs one resumed from a RAM cache entry
// (page 256: the entry covers all but the last < 256 rows), with whole-snapshot entries or split ones.
void BM_CpuPromptFirstToken(benchmark::State& state, Cache mode) {
  const int64_t length = state.range(0);
  const bool cached = mode != Cache::none;
  auto cpu_backend = make_backend();
  WholeSnapshots whole(*cpu_backend);
  lanes::Backend* backend = mode == Cache::whole ? static_cast<lanes::Backend*>(&whole) : cpu_backend.get();
  auto cache = std::move(cache::PromptCache::open({.page_tokens = 256, .ram_bytes = int64_t{8} << 30,
                                                   .model_id = "tiny-synthetic-seed-7",
                                                   .snapshot_version = backend->info().snapshot_version,
                                                   .row_tables = lanes::cache_row_tables(backend->info())}))
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
  if (cached) {
    const cache::PromptCacheStats s = cache->stats();
    state.counters["cache_entries"] = static_cast<double>(s.ram_entries);
    state.counters["cache_bytes"] = static_cast<double>(s.ram_bytes);
    state.counters["cache_page_bytes"] = static_cast<double>(s.ram_page_bytes);
  }
}

// Arg: prompt length. Prompt-cache bytes for the entries a prompt keeps at every 256-row page: whole snapshots
// (each entry a whole-state copy, as before row tables) against split entries sharing row pages.
void BM_CpuPromptCacheBytes(benchmark::State& state) {
  const int64_t length = state.range(0), page = 256;
  const std::vector<lanes::TokenId> prompt = prompt_of(length, 99);
  for (auto _ : state) {
    auto backend = make_backend();
    auto cache = std::move(cache::PromptCache::open({.page_tokens = static_cast<int32_t>(page),
                                                     .ram_bytes = int64_t{8} << 30,
                                                     .row_tables = lanes::cache_row_tables(backend->info())}))
                     .value();
    (void)backend->open(1, lanes::StreamSpec{{}, 0, length});
    int64_t whole = 0, entries = 0;
    for (int64_t at = 0; at + page < length; at += page) {
      lanes::Piece piece{1, at, std::span(prompt).subspan(static_cast<size_t>(at), static_cast<size_t>(page))};
      (void)backend->prefill({&piece, 1});
      // Cache keys of a text prompt: its token ids (image positions would carry their digest's bits).
      const std::vector<cache::Key> prefix(prompt.begin(), prompt.begin() + at + page);
      whole += static_cast<int64_t>(backend->snapshot(1)->size());
      const int64_t from = cache->shared_rows(prefix);
      lanes::SnapshotParts parts = std::move(backend->snapshot_parts(1, from)).value();
      (void)cache->insert_parts(prefix, std::move(parts.bounded), from, parts.rows);
      ++entries;
    }
    const cache::PromptCacheStats s = cache->stats();
    state.counters["entries"] = static_cast<double>(entries);
    state.counters["whole_bytes_per_entry"] = static_cast<double>(whole) / static_cast<double>(entries);
    state.counters["split_bytes_per_entry"] = static_cast<double>(s.ram_bytes) / static_cast<double>(entries);
    state.counters["bounded_bytes_per_entry"] =
        static_cast<double>(s.ram_bytes - s.ram_page_bytes) / static_cast<double>(entries);
    state.counters["row_bytes_per_position"] = static_cast<double>(s.ram_page_bytes) / static_cast<double>(entries * page);
  }
}
BENCHMARK(BM_CpuPromptCacheBytes)->Arg(2048)->Arg(8192)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_CpuPromptFirstToken, fresh, Cache::none)->Arg(2048)->Iterations(2)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_CpuPromptFirstToken, cached_whole, Cache::whole)->Arg(2048)->Iterations(2)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_CpuPromptFirstToken, cached_split, Cache::split)->Arg(2048)->Iterations(2)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace dsv4

BENCHMARK_MAIN();
