// The lane core's equalities on the CPU oracle (tiny preset, synthetic weights): drafted, pieces, concurrent,
// cancelled and resumed runs all equal a serial one-token-at-a-time decode written directly on the oracle.
#include <gtest/gtest.h>

#include <filesystem>

#include "family/deepseek_v41/synthetic_weights.h"
#include "family/deepseek_v41/layer_plan.h"
#include "backends/cpu/oracle_forward.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/state_geometry.h"
#include "lanes/lane_host.h"
#include "lanes/test_support.h"

namespace dsv4 {
namespace {
namespace fs = std::filesystem;
using lanes::Request;
using lanes::TokenId;

std::shared_ptr<const family::Model> tiny_weights() {
  static std::shared_ptr<const family::Model> weights = [] {
    auto config = family::preset_config(family::Preset::tiny, family::Variant::v41);
    return std::shared_ptr<const family::Model>(family::synthetic_weights(config, 7, true));
  }();
  return weights;
}

std::unique_ptr<engine::LaneBackend> make_backend(int32_t max_streams = 4) {
  engine::LaneBackendOptions options;
  options.model_id = "tiny-synthetic-seed-7";
  options.eos_ids = {1};
  options.max_streams = max_streams;
  auto backend = cpu::oracle_lane_backend(tiny_weights(), cpu::OracleOptions{}, options);
  EXPECT_TRUE(backend.ok()) << backend.status().to_string();
  return std::move(backend).value();
}

std::vector<TokenId> prompt_of(int64_t length, uint64_t salt) {
  std::vector<TokenId> out;
  for (int64_t i = 0; i < length; ++i) out.push_back(2 + static_cast<TokenId>(lanes::splitmix64_nth(salt, i + 1) % 5000));
  return out;
}

Request request_of(int64_t length, uint64_t salt, bool sampled, int32_t max_tokens) {
  Request r;
  r.prompt = prompt_of(length, salt);
  if (sampled) {
    r.sampling = lanes::SamplingParams{0.9f, 0, 1.0f, 0.05f};
    r.seed = 1000 + salt;
  }
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

// The serial decode: whole prompt but its last token, then one row per call, each drawn with the keyed
// sampler at its position. No lane core involved.
std::vector<TokenId> serial_decode(const Request& r) {
  auto oracle = std::move(cpu::Oracle::create(tiny_weights(), cpu::OracleOptions{})).value();
  const int32_t id = oracle->open_stream();
  const int64_t vocab = oracle->config().vocab;
  if (r.prompt.size() > 1) {
    EXPECT_TRUE(oracle->forward({engine::Piece{id, std::vector<int32_t>(r.prompt.begin(), r.prompt.end() - 1), {}}}).ok());
  }
  std::vector<TokenId> out;
  TokenId feed = r.prompt.back();
  int64_t position = static_cast<int64_t>(r.prompt.size()) - 1;
  while (static_cast<int32_t>(out.size()) < r.max_tokens) {
    auto result = oracle->forward({engine::Piece{id, {feed}, {0}}});
    EXPECT_TRUE(result.ok());
    std::span<const float> row((*result)[0].logits.data(), static_cast<size_t>(vocab));
    feed = lanes::sample_keyed(row, r.sampling, r.seed.value_or(lanes::seed_from_prompt(r.prompt)), position + 1);
    out.push_back(feed);
    ++position;
  }
  return out;
}

struct CpuRig {
  std::unique_ptr<engine::LaneBackend> backend = make_backend();
  std::unique_ptr<cache::PromptCache> cache;
  std::unique_ptr<lanes::LaneHost> host;
  std::shared_ptr<lanes::testing::Collector> sink = std::make_shared<lanes::testing::Collector>();
  explicit CpuRig(lanes::LaneHostOptions options = {}) {
    host = std::make_unique<lanes::LaneHost>(*backend, std::move(options));
  }
};

TEST(LanesOnCpuOracle, DraftedAndPiecesEqualSerial) {
  for (bool sampled : {false, true}) {
    for (int64_t length : {1, 19, 41}) {  // crosses the 16-row window and ratio-2/ratio-1 groups
      Request r = request_of(length, static_cast<uint64_t>(length), sampled, 10);
      if (!sampled) r.seed = 0;
      const std::vector<TokenId> expected = serial_decode(r);
      // Undrafted with the prompt whole (64 rows a piece), drafted with pieces of 3 rows.
      for (bool draft : {false, true}) {
        const int32_t pieces = draft ? 3 : 64;
        CpuRig run(lanes::LaneHostOptions{.prefill_rows = pieces});
        Request q = r;
        q.draft = draft;
        const lanes::RequestId id = *run.host->submit(q, run.sink);
        run.host->run_until_idle();
        lanes::testing::Outcome o = run.sink->get(id);
        EXPECT_EQ(o.tokens, expected) << "sampled " << sampled << " length " << length << " draft " << draft;
        if (draft) EXPECT_GT(o.finish.usage.drafted_tokens, 0);  // the DSpark head really proposed
      }
    }
  }
}

TEST(LanesOnCpuOracle, ConcurrentAndCancelledEqualSerial) {
  CpuRig run(lanes::LaneHostOptions{.max_batch_streams = 3, .prefill_rows = 8});
  std::vector<Request> requests = {request_of(23, 1, true, 12), request_of(5, 2, false, 14),
                                   request_of(37, 3, true, 9), request_of(12, 4, false, 12)};
  requests[1].seed = 0;
  requests[3].seed = 0;
  std::vector<lanes::RequestId> ids;
  for (size_t i = 0; i < requests.size(); ++i) {
    ids.push_back(*run.host->submit(requests[i], run.sink));
    run.host->step();  // arrivals one round apart
  }
  run.host->step();
  run.host->cancel(ids[2]);
  run.host->run_until_idle();
  for (size_t i : {0u, 1u, 3u}) EXPECT_EQ(run.sink->get(ids[i]).tokens, serial_decode(requests[i])) << i;
  EXPECT_EQ(run.sink->get(ids[2]).finish.reason, lanes::FinishReason::cancelled);
}

TEST(LanesOnCpuOracle, StepBudgetChunksEqualSerial) {
  // Three streams decode (drafted) when a long prompt arrives; a row budget gives the prompt what the windows leave
  // (at least 3 rows), a time budget on the steady clock whatever the timed steps predict. Either way every stream
  // equals its serial decode.
  std::vector<Request> requests = {request_of(5, 31, true, 14), request_of(3, 32, false, 16),
                                   request_of(9, 33, true, 12), request_of(61, 34, false, 6)};
  requests[1].seed = 0;
  requests[3].seed = 0;
  std::vector<std::vector<TokenId>> expected;
  for (const Request& r : requests) expected.push_back(serial_decode(r));
  for (bool timed : {false, true}) {
    CpuRig run(lanes::LaneHostOptions{.prefill_rows = 32, .step_rows = timed ? 0 : 10,
                                      .step_ns = timed ? 2'000'000 : 0, .min_step_prefill_rows = 3});
    std::vector<lanes::RequestId> ids;
    for (size_t i = 0; i < 3; ++i) ids.push_back(*run.host->submit(requests[i], run.sink));
    for (int i = 0; i < 3; ++i) run.host->step();
    ids.push_back(*run.host->submit(requests[3], run.sink));
    run.host->run_until_idle();
    for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(run.sink->get(ids[i]).tokens, expected[i]) << timed << " " << i;
    if (!timed) {
      // Three drafted windows take 3 to 10 rows of the 10: the 60 prompt rows went in pieces of the 3-row floor to
      // 9 rows, the first at the floor.
      const std::vector<int64_t> rows = run.sink->get(ids[3]).prefill_rows;
      ASSERT_GE(rows.size(), 7u);
      EXPECT_EQ(rows[0], 3);
      for (size_t i = 0; i < rows.size(); ++i) EXPECT_LE(rows[i] - (i == 0 ? 0 : rows[i - 1]), 9) << i;
    }
  }
}

TEST(LanesOnCpuOracle, ResumedFromRamAndDiskEqualsFresh) {
  const fs::path dir = fs::path(DSV4_BINARY_DIR) / "test-tmp" / "lanes_cpu_cache";
  fs::remove_all(dir);
  Request r = request_of(45, 9, true, 8);
  const std::vector<TokenId> expected = serial_decode(r);
  for (int64_t ram : {int64_t{1} << 30, int64_t{0}}) {  // RAM tier, then everything parked on disk
    CpuRig run;
    run.cache = std::move(cache::PromptCache::open({.page_tokens = 16, .ram_bytes = ram, .disk_dir = dir.string(),
                                                     .disk_bytes = int64_t{1} << 32,
                                                     .model_id = "tiny-synthetic-seed-7",
                                                     .snapshot_version = run.backend->info().snapshot_version,
                                                     .row_tables = lanes::cache_row_tables(run.backend->info())}))
                    .value();
    run.host = std::make_unique<lanes::LaneHost>(*run.backend, lanes::LaneHostOptions{.cache = run.cache.get()});
    for (int pass = 0; pass < 2; ++pass) {
      const lanes::RequestId id = *run.host->submit(r, run.sink);
      run.host->run_until_idle();
      lanes::testing::Outcome o = run.sink->get(id);
      EXPECT_EQ(o.tokens, expected) << "ram " << ram << " pass " << pass;
      // 44 prompt rows: entries kept at 16 and 32; the second pass resumes at 32.
      EXPECT_EQ(o.finish.usage.cached_prompt_tokens, pass == 0 ? 0 : 32);
    }
  }
}

TEST(LanesOnCpuOracle, NestedEntriesShareRowPagesAndResumeExactly) {
  // Pages of 7 tokens, pieces of 7 rows: entries at 7, 14, .., 42 of a 45-token prompt. 7 is odd, so ratio-2 groups
  // straddle page boundaries; 14 < 16 < 21 puts the window edge inside a page. RAM tier, then disk only.
  const fs::path dir = fs::path(DSV4_BINARY_DIR) / "test-tmp" / "lanes_cpu_pages";
  fs::remove_all(dir);
  Request r = request_of(45, 21, true, 6);
  const std::vector<TokenId> expected = serial_decode(r);
  for (int64_t ram : {int64_t{1} << 30, int64_t{0}}) {
    CpuRig run;
    const lanes::BackendInfo& info = run.backend->info();
    run.cache = std::move(cache::PromptCache::open({.page_tokens = 7, .ram_bytes = ram, .disk_dir = dir.string(),
                                                     .disk_bytes = int64_t{1} << 32, .model_id = info.model_id,
                                                     .snapshot_version = info.snapshot_version,
                                                     .row_tables = lanes::cache_row_tables(info)}))
                    .value();
    run.host = std::make_unique<lanes::LaneHost>(*run.backend,
                                                 lanes::LaneHostOptions{.prefill_rows = 7, .cache = run.cache.get()});
    for (int pass = 0; pass < 2; ++pass) {
      const lanes::RequestId id = *run.host->submit(r, run.sink);
      run.host->run_until_idle();
      lanes::testing::Outcome o = run.sink->get(id);
      EXPECT_EQ(o.tokens, expected) << "ram " << ram << " pass " << pass;
      EXPECT_EQ(o.finish.usage.cached_prompt_tokens, pass == 0 ? 0 : 42);
    }
    if (ram == 0) {
      EXPECT_EQ(run.cache->stats().disk_entries, 6);
      EXPECT_EQ(run.cache->stats().disk_pages, 6);
      continue;
    }
    // Six entries: one copy of the table rows of 42 positions plus six bounded parts. The expected counts come from
    // the state layout (stream_state.h): tables = history (8 bytes a position), then per KV-source layer compressed
    // and index-key rows, one per `ratio` positions; a bounded part at L rows = magic, a 5-value header, then
    // length-prefixed vectors: per layer the window ring's last min(L, window) rows and the two fp64 projection rings'
    // L % ratio partial-group rows (ratio-2 KV sources) and two empty indexer projection rings (V4 only), then the
    // DSpark stage count and rings' last min(L, window).
    family::StateGeometryOptions go;
    go.max_rollback = cpu::OracleOptions{}.max_rollback;
    const family::StateGeometry g = family::make_state_geometry(family::build_plan(tiny_weights()->config), go);
    const int64_t window = tiny_weights()->config.sliding_window;
    int64_t rows_bytes = 42 * 8, bounded = 0;
    for (const family::LayerStateShape& l : g.layers) {
      if (l.kv_source) rows_bytes += (42 / l.ratio) * (g.compressed_row + g.index_row);
    }
    for (int64_t L = 7; L <= 42; L += 7) {
      const int64_t recent = std::min<int64_t>(L, window);
      bounded += 8 + (8 + 5 * 8);
      for (const family::LayerStateShape& l : g.layers) {
        const int64_t partial = l.kv_source && l.ratio > 1 ? L % l.ratio : 0;
        bounded += (8 + recent * g.window_row) + 2 * (8 + partial * g.d * 8) + 2 * 8;  // + empty indexer rings
      }
      bounded += (8 + 8) + g.dspark_stages * (8 + recent * g.window_row);
    }
    const cache::PromptCacheStats s = run.cache->stats();
    EXPECT_EQ(s.ram_entries, 6);
    EXPECT_EQ(s.ram_pages, 6);
    EXPECT_EQ(s.ram_page_bytes, rows_bytes);
    EXPECT_EQ(s.ram_bytes, rows_bytes + bounded);
  }
}

}  // namespace
}  // namespace dsv4
