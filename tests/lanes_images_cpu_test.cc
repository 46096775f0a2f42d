// Prompts with image spans (given embedding rows) through the lane core on the CPU oracle (tiny preset): pieces of any
// size with drafts, concurrent streams, and prompts resumed from the cache (mid-span included) all equal a serial
// decode written directly on the oracle; a different image never resumes past the page before its span.
#include <gtest/gtest.h>

#include "backends/cpu/oracle_forward.h"
#include "family/deepseek_v41/synthetic_weights.h"
#include "engine/image_encoder_testing.h"
#include "family/deepseek_v41/preset.h"
#include "lanes/lane_host.h"
#include "lanes/test_support.h"

namespace dsv4 {
namespace {
using lanes::Request;
using lanes::TokenId;

constexpr TokenId kImageToken = 129264;

std::shared_ptr<const family::Model> tiny_weights() {
  static std::shared_ptr<const family::Model> weights =
      family::synthetic_weights(family::preset_config(family::Preset::tiny, family::Variant::v41), 7, true);
  return weights;
}

// A prompt of `length` tokens whose [start, start + count) is an image span with rows from `image`.
Request with_image(int64_t length, uint64_t salt, int64_t start, int64_t count, uint64_t image) {
  const int64_t D = tiny_weights()->plan.dim;
  Request r;
  for (int64_t i = 0; i < length; ++i) r.prompt.push_back(2 + static_cast<TokenId>(lanes::splitmix64_nth(salt, i + 1) % 5000));
  for (int64_t i = start; i < start + count; ++i) r.prompt[static_cast<size_t>(i)] = kImageToken;
  lanes::PromptEmbeds e;
  e.start = start;
  e.count = count;
  e.values = std::make_shared<std::vector<uint16_t>>(engine::testing::hashed_row(image, count * D));
  for (size_t i = 0; i < e.digest.size(); ++i) e.digest[i] = static_cast<uint8_t>(engine::testing::mix64(image + i));
  r.embeds.push_back(std::move(e));
  r.sampling = lanes::SamplingParams{0.9f, 0, 1.0f, 0.05f};
  r.seed = 500 + salt;
  r.max_tokens = 8;
  r.ignore_eos = true;
  return r;
}

// The serial decode: the prompt but its last token in one piece (its spans' rows given), then one row per call.
std::vector<TokenId> serial_decode(const Request& r) {
  auto oracle = std::move(cpu::Oracle::create(tiny_weights(), cpu::OracleOptions{})).value();
  const int32_t id = oracle->open_stream();
  engine::Piece prompt{id, std::vector<int32_t>(r.prompt.begin(), r.prompt.end() - 1), {}, {}};
  for (const lanes::PromptEmbeds& e : r.embeds) prompt.embeds.push_back({e.start, e.count, *e.values, e.image});
  EXPECT_TRUE(oracle->forward({prompt}).ok());
  std::vector<TokenId> out;
  TokenId feed = r.prompt.back();
  int64_t position = static_cast<int64_t>(r.prompt.size()) - 1;
  while (static_cast<int32_t>(out.size()) < r.max_tokens) {
    auto result = oracle->forward({engine::Piece{id, {feed}, {0}, {}}});
    EXPECT_TRUE(result.ok());
    std::span<const float> row((*result)[0].logits.data(), static_cast<size_t>(oracle->config().vocab));
    feed = lanes::sample_keyed(row, r.sampling, *r.seed, position + 1);
    out.push_back(feed);
    ++position;
  }
  return out;
}

struct CpuRig {
  std::unique_ptr<engine::LaneBackend> backend;
  std::unique_ptr<cache::PromptCache> cache;
  std::unique_ptr<lanes::LaneHost> host;
  std::shared_ptr<lanes::testing::Collector> sink = std::make_shared<lanes::testing::Collector>();
  explicit CpuRig(lanes::LaneHostOptions options, bool with_cache = false) {
    engine::LaneBackendOptions bo;
    bo.model_id = "tiny-synthetic-seed-7";
    bo.max_streams = 4;
    backend = std::move(cpu::oracle_lane_backend(tiny_weights(), cpu::OracleOptions{}, bo)).value();
    if (with_cache) {
      cache = std::move(cache::PromptCache::open({.page_tokens = 8, .ram_bytes = 1 << 30, .model_id = bo.model_id,
                                                  .snapshot_version = backend->info().snapshot_version,
                                                  .row_tables = lanes::cache_row_tables(backend->info())}))
                  .value();
      options.cache = cache.get();
    }
    host = std::make_unique<lanes::LaneHost>(*backend, options);
  }
  lanes::testing::Outcome run(const Request& r) {
    const lanes::RequestId id = *host->submit(r, sink);
    host->run_until_idle();
    return sink->get(id);
  }
};

TEST(LanesImagesOnCpuOracle, PiecesAndDraftsEqualSerial) {
  const Request r = with_image(37, 1, 5, 22, 100);  // the span crosses the 16-row window and the compressor groups
  const std::vector<TokenId> expected = serial_decode(r);
  for (int32_t rows : {64, 9, 4}) {
    CpuRig rig(lanes::LaneHostOptions{.prefill_rows = rows});
    for (bool draft : {false, true}) {
      Request q = r;
      q.draft = draft;
      lanes::testing::Outcome o = rig.run(q);
      EXPECT_EQ(o.tokens, expected) << "pieces of " << rows << " draft " << draft;
      EXPECT_EQ(o.finish.usage.prompt_tokens, 37);
    }
  }
  // Another image's rows give another reply (the rows reach the output).
  EXPECT_NE(serial_decode(with_image(37, 1, 5, 22, 101)), expected);
}

TEST(LanesImagesOnCpuOracle, ConcurrentEqualsSolo) {
  CpuRig rig(lanes::LaneHostOptions{.max_batch_streams = 3, .prefill_rows = 10});
  std::vector<Request> requests = {with_image(30, 2, 3, 14, 200), with_image(26, 3, 11, 9, 201),
                                   with_image(33, 4, 0, 20, 200)};
  std::vector<lanes::RequestId> ids;
  for (const Request& r : requests) {
    ids.push_back(*rig.host->submit(r, rig.sink));
    rig.host->step();
  }
  rig.host->run_until_idle();
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(rig.sink->get(ids[i]).tokens, serial_decode(requests[i])) << i;
}

TEST(LanesImagesOnCpuOracle, ResumedEqualsFreshAndAnotherImageNeverHits) {
  CpuRig rig(lanes::LaneHostOptions{.prefill_rows = 8}, true);  // a snapshot at every 8-token page
  const Request a = with_image(44, 5, 10, 19, 300);             // span [10, 29): pages 16 and 24 end inside it
  const std::vector<TokenId> fresh = serial_decode(a);
  EXPECT_EQ(rig.run(a).tokens, fresh);
  lanes::testing::Outcome again = rig.run(a);
  EXPECT_EQ(again.tokens, fresh);
  EXPECT_EQ(again.finish.usage.cached_prompt_tokens, 40);

  const Request b = with_image(44, 5, 10, 19, 301);  // the same text, another image
  lanes::testing::Outcome other = rig.run(b);
  EXPECT_EQ(other.tokens, serial_decode(b));
  EXPECT_EQ(other.finish.usage.cached_prompt_tokens, 8);

  Request c = a;  // the same image, other text from position 29: resumes at 24, mid-span
  for (size_t i = 29; i < c.prompt.size(); ++i) c.prompt[i] = 2 + (c.prompt[i] + 7) % 5000;
  lanes::testing::Outcome mid = rig.run(c);
  EXPECT_EQ(mid.tokens, serial_decode(c));
  EXPECT_EQ(mid.finish.usage.cached_prompt_tokens, 24);
}

}  // namespace
}  // namespace dsv4
