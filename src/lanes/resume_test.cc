// Resumed from the prompt cache (RAM and disk tiers, whole and split snapshots) equals fresh, with exact hit lengths;
// split entries share row pages (exact byte counts from the fake's geometry); damaged entries and pages re-prefill.
#include <gtest/gtest.h>

#include <filesystem>
#include <cstring>
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

// The cache options a rig uses: its geometry and identity from the fake backend's info.
cache::PromptCacheOptions with_backend(cache::PromptCacheOptions options, const FakeBackend& fake) {
  options.model_id = fake.info().model_id;
  options.snapshot_version = fake.info().snapshot_version;
  options.row_tables = cache_row_tables(fake.info());
  return options;
}

struct CacheRig {
  explicit CacheRig(cache::PromptCacheOptions cache_options, int32_t prefill_rows = 64, bool split = true)
      : fake(FakeBackendOptions{.split_snapshots = split}),
        cache(std::move(cache::PromptCache::open(with_backend(std::move(cache_options), fake))).value()),
        host(fake, LaneHostOptions{.prefill_rows = prefill_rows, .cache = cache.get()}),
        sink(std::make_shared<testing::Collector>()) {}
  testing::Outcome run(const Request& r) {
    const RequestId id = *host.submit(r, sink);
    host.run_until_idle();
    return sink->get(id);
  }
  FakeBackend fake;
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
  for (bool split : {false, true}) {
  for (bool sampled : {false, true}) {
    CacheRig rig({.page_tokens = 16, .ram_bytes = 1 << 20}, 64, split);
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
}

TEST(Resume, DiskHitsEqualFreshAndDamageFallsBackToPrefill) {
  for (bool split : {false, true}) {
  const fs::path dir = fs::path(DSV4_BINARY_DIR) / "test-tmp" / "resume_disk";
  fs::remove_all(dir);
  const std::vector<TokenId> a = prompt_of(150, 3);
  Request r = request_with(a, true);
  std::vector<TokenId> expected;
  {
    // RAM budget 0: every snapshot goes straight to disk.
    CacheRig rig({.page_tokens = 32, .ram_bytes = 0, .disk_dir = dir.string(), .disk_bytes = 1 << 20}, 64, split);
    expected = testing::serial_reference(rig.fake, r);
    EXPECT_EQ(rig.run(r).tokens, expected);
    EXPECT_EQ(rig.cache->disk_lru_rows(), (std::vector<int64_t>{64, 128}));
  }
  {
    // A restarted engine resumes from the files.
    CacheRig rig({.page_tokens = 32, .ram_bytes = 0, .disk_dir = dir.string(), .disk_bytes = 1 << 20}, 64, split);
    testing::Outcome o = rig.run(r);
    EXPECT_EQ(o.tokens, expected);
    EXPECT_EQ(o.finish.usage.cached_prompt_tokens, 128);
  }
  // Damage every entry file: the payload checksum fails, entries are discarded, the prompt prefills fresh.
  for (const auto& f : fs::directory_iterator(dir)) {
    if (f.path().extension() != ".pce") continue;
    std::fstream file(f.path(), std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-3, std::ios::end);
    file.put(0x55);
  }
  {
    CacheRig rig({.page_tokens = 32, .ram_bytes = 0, .disk_dir = dir.string(), .disk_bytes = 1 << 20}, 64, split);
    testing::Outcome o = rig.run(r);
    EXPECT_EQ(o.tokens, expected);
    EXPECT_EQ(o.finish.usage.cached_prompt_tokens, 0);
    EXPECT_EQ(rig.host.status().cache_discarded, 2);
  }
  }
}

TEST(Resume, SnapshotTheBackendRefusesIsDiscarded) {
  // A cache entry whose bytes the backend rejects (restore fails): dropped, prompt prefilled fresh.
  for (bool split : {false, true}) {
  CacheRig rig({.page_tokens = 16, .ram_bytes = 1 << 20}, 64, split);
  const std::vector<TokenId> a = prompt_of(40, 9);
  if (split) {
    // Rows of the right sizes (32 chain rows, 10 group digests) that are not the fake's: restore_parts refuses.
    ASSERT_TRUE(rig.cache->insert_parts(std::span<const cache::Key>(cache::token_keys(a)).first(32), cache::Bytes(24, 0xEE), 0,
                                        {cache::Bytes(32 * 8, 0x11), cache::Bytes(10 * 8, 0x22)})
                    .ok());
  } else {
    ASSERT_TRUE(rig.cache->insert(std::span<const cache::Key>(cache::token_keys(a)).first(32), cache::Bytes(24, 0xEE)).ok());
  }
  Request r = request_with(a, false);
  testing::Outcome o = rig.run(r);
  EXPECT_EQ(o.tokens, testing::serial_reference(rig.fake, r));
  EXPECT_EQ(o.finish.usage.cached_prompt_tokens, 0);
  EXPECT_EQ(rig.cache->stats().discarded, 1);
  EXPECT_TRUE(rig.cache->contains(std::span<const cache::Key>(cache::token_keys(a)).first(32)));  // re-kept from the fresh prefill
  }
}

// Expected bytes below come from the fake's geometry (lanes/fake_backend.h): a 24-byte bounded part per entry,
// 8 bytes per position (chain) and 8 bytes per 3 positions (group digest) of table rows.
TEST(Resume, NestedEntriesShareRowPages) {
  // Pieces of 16 rows with 16-token pages: an entry at every page boundary of a 99-row prompt (16 .. 96).
  CacheRig rig({.page_tokens = 16, .ram_bytes = 1 << 20}, 16);
  const std::vector<TokenId> a = prompt_of(100, 11);
  Request r = request_with(a, true);
  EXPECT_EQ(rig.run(r).tokens, testing::serial_reference(rig.fake, r));
  EXPECT_EQ(rig.cache->ram_lru_rows(), (std::vector<int64_t>{16, 32, 48, 64, 80, 96}));
  // One copy of the rows of 96 positions (96 chain rows, 32 digests) plus six bounded parts.
  const cache::PromptCacheStats s = rig.cache->stats();
  EXPECT_EQ(s.ram_page_bytes, 96 * 8 + 32 * 8);
  EXPECT_EQ(s.ram_bytes, 6 * 24 + 96 * 8 + 32 * 8);
  EXPECT_EQ(s.ram_pages, 6);
  // Whole snapshots would hold sum over k of (16 + 8 * 16k) = 96 + 8 * 16 * 21 bytes instead.
  for (int64_t k = 1; k <= 6; ++k) EXPECT_EQ(rig.cache->page_users(std::span<const cache::Key>(cache::token_keys(a)).first(16 * k)), 7 - k) << k;
  // A second prompt sharing the first 40 tokens shares the first two pages; its entries add only its own.
  std::vector<TokenId> b(a.begin(), a.begin() + 40);
  const std::vector<TokenId> tail = prompt_of(30, 12);
  b.insert(b.end(), tail.begin(), tail.end());
  Request second = request_with(b, false);
  testing::Outcome o = rig.run(second);
  EXPECT_EQ(o.tokens, testing::serial_reference(rig.fake, second));
  EXPECT_EQ(o.finish.usage.cached_prompt_tokens, 32);
  // b's 69 prompt rows add entries at 48 and 64: pages [32, 48) and [48, 64) of b.
  EXPECT_EQ(rig.cache->stats().ram_page_bytes, (96 + 32) * 8 + (16 + 6) * 8 + (16 + 5) * 8);
  EXPECT_EQ(rig.cache->stats().ram_bytes, 8 * 24 + (96 + 32) * 8 + (16 + 6) * 8 + (16 + 5) * 8);
  EXPECT_EQ(rig.cache->page_users(std::span<const cache::Key>(cache::token_keys(a)).first(32)), 5 + 2);  // a's 32 .. 96 and b's 48, 64
  EXPECT_EQ(rig.cache->page_users(std::span<const cache::Key>(cache::token_keys(b)).first(48)), 2);
}

TEST(Resume, EvictionKeepsPagesOthersUse) {
  // Entries at 16, 32, 48 of a 49-row prompt. Pages: [0,16) 16*8 + 5*8 = 168, [16,32) 128 + 5*8 = 168,
  // [32,48) 128 + 6*8 = 176 bytes; with 3 * 24 bounded bytes that is 584 > 560: the 16-row entry (least recently
  // used) goes, which frees only its 24 bounded bytes — its page stays for the two deeper entries.
  CacheRig rig({.page_tokens = 16, .ram_bytes = 560}, 16);
  const std::vector<TokenId> a = prompt_of(50, 13);
  Request r = request_with(a, true);
  const std::vector<TokenId> expected = testing::serial_reference(rig.fake, r);
  EXPECT_EQ(rig.run(r).tokens, expected);
  EXPECT_EQ(rig.cache->ram_lru_rows(), (std::vector<int64_t>{32, 48}));
  EXPECT_EQ(rig.cache->stats().ram_bytes, 560);
  EXPECT_EQ(rig.cache->stats().dropped, 1);
  EXPECT_EQ(rig.cache->page_users(std::span<const cache::Key>(cache::token_keys(a)).first(16)), 2);
  EXPECT_EQ(rig.cache->page_users(std::span<const cache::Key>(cache::token_keys(a)).first(32)), 2);
  EXPECT_EQ(rig.cache->page_users(std::span<const cache::Key>(cache::token_keys(a)).first(48)), 1);
  testing::Outcome o = rig.run(r);
  EXPECT_EQ(o.tokens, expected);
  EXPECT_EQ(o.finish.usage.cached_prompt_tokens, 48);
  // A prompt sharing only the first 20 tokens: no entry on its path is left (16 went), so it prefills fresh. Its
  // entry at 16 adds 24 bounded bytes over the shared page (584 > 560: a's 32, least recently used, goes and frees
  // its 24); its entry at 32 adds 24 + its own page of 168 (752 > 560: a's 48 goes, and with its last user gone
  // a's pages [16,32) and [32,48) too: 384).
  std::vector<TokenId> b(a.begin(), a.begin() + 20);
  const std::vector<TokenId> tail = prompt_of(20, 14);
  b.insert(b.end(), tail.begin(), tail.end());
  Request second = request_with(b, false);
  o = rig.run(second);
  EXPECT_EQ(o.tokens, testing::serial_reference(rig.fake, second));
  EXPECT_EQ(o.finish.usage.cached_prompt_tokens, 0);
  EXPECT_EQ(rig.cache->ram_lru_rows(), (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(rig.cache->stats().ram_bytes, 2 * 24 + 168 + 168);
  EXPECT_EQ(rig.cache->page_users(std::span<const cache::Key>(cache::token_keys(a)).first(16)), 2);
  EXPECT_EQ(rig.cache->page_users(std::span<const cache::Key>(cache::token_keys(a)).first(32)), 0);
}

TEST(Resume, DamagedRowPageDiscardsTheEntriesThatNeedIt) {
  const fs::path dir = fs::path(DSV4_BINARY_DIR) / "test-tmp" / "resume_pages";
  fs::remove_all(dir);
  const std::vector<TokenId> a = prompt_of(150, 15);
  Request r = request_with(a, true);
  auto damage = [&](const char* suffix) {
    int damaged = 0;
    for (const auto& f : fs::directory_iterator(dir)) {
      const std::string name = f.path().filename().string();
      if (name.size() < std::strlen(suffix) || name.compare(name.size() - std::strlen(suffix), std::string::npos, suffix) != 0) continue;
      std::fstream file(f.path(), std::ios::in | std::ios::out | std::ios::binary);
      file.seekp(-5, std::ios::end);
      file.put(0x5A);
      ++damaged;
    }
    return damaged;
  };
  // RAM budget 0: entries at 64 and 128 (pieces of 64) are parked with the row pages of nodes 32, 64, 96, 128.
  CacheRig rig({.page_tokens = 32, .ram_bytes = 0, .disk_dir = dir.string(), .disk_bytes = 1 << 20}, 64);
  const std::vector<TokenId> expected = testing::serial_reference(rig.fake, r);
  EXPECT_EQ(rig.run(r).tokens, expected);
  EXPECT_EQ(rig.cache->disk_lru_rows(), (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(rig.cache->stats().disk_pages, 4);
  testing::Outcome o = rig.run(r);
  EXPECT_EQ(o.tokens, expected);
  EXPECT_EQ(o.finish.usage.cached_prompt_tokens, 128);
  // The page [64, 96) only the 128-row entry needs: that entry goes, the 64-row one serves.
  ASSERT_EQ(damage("-96.pcr"), 1);
  o = rig.run(r);
  EXPECT_EQ(o.tokens, expected);
  EXPECT_EQ(o.finish.usage.cached_prompt_tokens, 64);
  EXPECT_EQ(rig.cache->stats().discarded, 1);
  EXPECT_EQ(rig.cache->disk_lru_rows(), (std::vector<int64_t>{64, 128}));  // 128 kept again by the refill
  // The first page, which both need: both go and the prompt prefills fresh.
  ASSERT_EQ(damage("-32.pcr"), 1);
  o = rig.run(r);
  EXPECT_EQ(o.tokens, expected);
  EXPECT_EQ(o.finish.usage.cached_prompt_tokens, 0);
  EXPECT_EQ(rig.cache->stats().discarded, 3);
  EXPECT_EQ(rig.host.status().cache_discarded, 3);
}

}  // namespace
}  // namespace dsv4::lanes
