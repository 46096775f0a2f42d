// Resumed from the prompt cache (RAM and disk tiers) equals fresh, with exact hit lengths; damaged entries re-prefill.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "lanes/lane_host.h"
#include "lanes/test_support.h"

namespace dsv4::lanes {
namespace {
namespace fs = std::filesystem;

std::vector<TokenId> prompt_of(int64_t length, uint64_t salt) {
  std::vector<TokenId> out;
  for (int64_t i = 0; i < length; ++i) out.push_back(1 + static_cast<TokenId>(splitmix64_nth(salt, i + 1) % 60));
  return out;
}

struct CacheRig {
  explicit CacheRig(cache::PromptCacheOptions cache_options, int32_t prefill_rows = 64)
      : cache(std::move(cache::PromptCache::open(std::move(cache_options))).value()),
        host(fake, LaneHostOptions{.prefill_rows = prefill_rows, .cache = cache.get()}),
        sink(std::make_shared<testing::Collector>()) {}
  testing::Outcome run(const Request& r) {
    const RequestId id = *host.submit(r, sink);
    host.run_until_idle();
    return sink->get(id);
  }
  FakeBackend fake{FakeBackendOptions{}};
  std::unique_ptr<cache::PromptCache> cache;
  LaneHost host;
  std::shared_ptr<testing::Collector> sink;
};

Request request_with(std::vector<TokenId> prompt, bool sampled) {
  Request r;
  r.prompt = std::move(prompt);
  if (sampled) r.sampling = SamplingParams{1.0f, 20, 0.9f, 0.02f};
  r.max_tokens = 30;
  return r;
}

TEST(Resume, RamHitsEqualFreshAtTheExpectedRows) {
  for (bool sampled : {false, true}) {
    CacheRig rig({.page_tokens = 16, .ram_bytes = 1 << 20});
    const std::vector<TokenId> a = prompt_of(100, 1);
    // 99 prompt rows in pieces of 64: [0,64) then [64,96) (ends on the page boundary) then [96,99).
    Request first = request_with(a, sampled);
    EXPECT_EQ(rig.run(first).tokens, testing::serial_reference(rig.fake, first));
    EXPECT_EQ(rig.cache->ram_lru_rows(), (std::vector<int64_t>{64, 96}));

    // Shares 90 tokens with a: the longest entry on its path is 64 (the 96 page differs).
    std::vector<TokenId> b(a.begin(), a.begin() + 90);
    const std::vector<TokenId> tail = prompt_of(20, 2);
    b.insert(b.end(), tail.begin(), tail.end());
    Request second = request_with(b, sampled);
    testing::Outcome o = rig.run(second);
    EXPECT_EQ(o.tokens, testing::serial_reference(rig.fake, second));
    EXPECT_EQ(o.finish.usage.cached_prompt_tokens, 64);

    Request third = request_with(a, sampled);
    third.max_tokens = 12;
    o = rig.run(third);
    EXPECT_EQ(o.tokens, testing::serial_reference(rig.fake, third));
    EXPECT_EQ(o.finish.usage.cached_prompt_tokens, 96);
    EXPECT_EQ(rig.host.status().cache_hits, 2);
    EXPECT_EQ(rig.host.status().cache_hit_tokens, 160);
  }
}

TEST(Resume, DiskHitsEqualFreshAndDamageFallsBackToPrefill) {
  const fs::path dir = fs::path(DSV4_BINARY_DIR) / "test-tmp" / "resume_disk";
  fs::remove_all(dir);
  const std::vector<TokenId> a = prompt_of(150, 3);
  Request r = request_with(a, true);
  std::vector<TokenId> expected;
  {
    // RAM budget 0: every snapshot goes straight to disk.
    CacheRig rig({.page_tokens = 32, .ram_bytes = 0, .disk_dir = dir.string(), .disk_bytes = 1 << 20,
                  .model_id = "fake", .snapshot_version = 1});
    expected = testing::serial_reference(rig.fake, r);
    EXPECT_EQ(rig.run(r).tokens, expected);
    EXPECT_EQ(rig.cache->disk_lru_rows(), (std::vector<int64_t>{64, 128}));
  }
  {
    // A restarted engine resumes from the files.
    CacheRig rig({.page_tokens = 32, .ram_bytes = 0, .disk_dir = dir.string(), .disk_bytes = 1 << 20,
                  .model_id = "fake", .snapshot_version = 1});
    testing::Outcome o = rig.run(r);
    EXPECT_EQ(o.tokens, expected);
    EXPECT_EQ(o.finish.usage.cached_prompt_tokens, 128);
  }
  // Damage every file: the payload checksum fails, entries are discarded, the prompt prefills fresh.
  for (const auto& f : fs::directory_iterator(dir)) {
    std::fstream file(f.path(), std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-3, std::ios::end);
    file.put(0x55);
  }
  {
    CacheRig rig({.page_tokens = 32, .ram_bytes = 0, .disk_dir = dir.string(), .disk_bytes = 1 << 20,
                  .model_id = "fake", .snapshot_version = 1});
    testing::Outcome o = rig.run(r);
    EXPECT_EQ(o.tokens, expected);
    EXPECT_EQ(o.finish.usage.cached_prompt_tokens, 0);
    EXPECT_EQ(rig.host.status().cache_discarded, 2);
  }
}

TEST(Resume, SnapshotTheBackendRefusesIsDiscarded) {
  // A cache entry whose bytes the backend rejects (restore fails): dropped, prompt prefilled fresh.
  CacheRig rig({.page_tokens = 16, .ram_bytes = 1 << 20});
  const std::vector<TokenId> a = prompt_of(40, 9);
  ASSERT_TRUE(rig.cache->insert(std::span(a).first(32), cache::Bytes(24, 0xEE)).ok());
  Request r = request_with(a, false);
  testing::Outcome o = rig.run(r);
  EXPECT_EQ(o.tokens, testing::serial_reference(rig.fake, r));
  EXPECT_EQ(o.finish.usage.cached_prompt_tokens, 0);
  EXPECT_EQ(rig.cache->stats().discarded, 1);
  EXPECT_TRUE(rig.cache->contains(std::span(a).first(32)));  // re-kept from the fresh prefill
}

}  // namespace
}  // namespace dsv4::lanes
