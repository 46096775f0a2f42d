// Prompt cache bookkeeping with exact expectations: trie lookups, LRU eviction order, disk park/restore, discards.
#include "cache/prompt_cache.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace dsv4::cache {
namespace {
namespace fs = std::filesystem;

std::vector<TokenId> tokens(int64_t n, TokenId base) {
  std::vector<TokenId> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(base + static_cast<TokenId>(i));
  return out;
}

Bytes payload(size_t n, uint8_t fill) { return Bytes(n, fill); }

std::unique_ptr<PromptCache> open_cache(PromptCacheOptions options) {
  StatusOr<std::unique_ptr<PromptCache>> cache = PromptCache::open(std::move(options));
  EXPECT_TRUE(cache.ok()) << cache.status().to_string();
  return std::move(cache).value();
}

// A fresh directory under the build tree for one test.
std::string temp_dir(const char* name) {
  const fs::path dir = fs::path(DSV4_BINARY_DIR) / "test-tmp" / name;
  fs::remove_all(dir);
  return dir.string();
}

TEST(PromptCache, LongestPrefixWithinTheLimit) {
  auto cache = open_cache({.page_tokens = 4, .ram_bytes = 1 << 20});
  const std::vector<TokenId> t = tokens(20, 100);
  ASSERT_TRUE(cache->insert(std::span(t).first(4), payload(10, 4)).ok());
  ASSERT_TRUE(cache->insert(std::span(t).first(12), payload(10, 12)).ok());
  EXPECT_FALSE(cache->insert(std::span(t).first(6), payload(1, 6)).ok());  // not a page multiple

  auto hit = cache->lookup(t, 19);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->rows, 12);
  EXPECT_EQ((*hit->bytes)[0], 12);
  hit = cache->lookup(t, 11);  // 12 rows would leave too few: the 4-row entry
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->rows, 4);
  std::vector<TokenId> other = t;
  other[9] = 7;  // differs inside the third page
  hit = cache->lookup(other, 19);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->rows, 4);
  other[0] = 7;  // differs in the first page
  EXPECT_FALSE(cache->lookup(other, 19).has_value());
  EXPECT_TRUE(cache->contains(std::span(t).first(12)));
  EXPECT_FALSE(cache->contains(std::span(t).first(8)));  // a trie node without an entry
  const PromptCacheStats s = cache->stats();
  EXPECT_EQ(s.lookups, 4);
  EXPECT_EQ(s.hits, 3);
  EXPECT_EQ(s.hit_rows, 12 + 4 + 4);
  EXPECT_EQ(s.ram_bytes, 20);
}

TEST(PromptCache, RamEvictsLeastRecentlyUsedFirst) {
  auto cache = open_cache({.page_tokens = 2, .ram_bytes = 300});
  const std::vector<TokenId> a = tokens(8, 0), b = tokens(8, 50), c = tokens(8, 90);
  ASSERT_TRUE(cache->insert(std::span(a).first(2), payload(100, 1)).ok());
  ASSERT_TRUE(cache->insert(std::span(b).first(4), payload(100, 2)).ok());
  ASSERT_TRUE(cache->insert(std::span(c).first(6), payload(100, 3)).ok());
  EXPECT_EQ(cache->ram_lru_rows(), (std::vector<int64_t>{2, 4, 6}));
  ASSERT_TRUE(cache->lookup(a, 8).has_value());  // a becomes most recent
  EXPECT_EQ(cache->ram_lru_rows(), (std::vector<int64_t>{4, 6, 2}));
  ASSERT_TRUE(cache->insert(std::span(a).first(8), payload(150, 4)).ok());  // 450 > 300: b, then c go
  EXPECT_EQ(cache->ram_lru_rows(), (std::vector<int64_t>{2, 8}));
  EXPECT_FALSE(cache->contains(std::span(b).first(4)));
  EXPECT_FALSE(cache->contains(std::span(c).first(6)));
  EXPECT_EQ(cache->stats().dropped, 2);
  EXPECT_EQ(cache->stats().ram_bytes, 250);
}

TEST(PromptCache, DiskTierParksAndRestores) {
  const std::string dir = temp_dir("prompt_cache_park");
  auto cache = open_cache({.page_tokens = 4, .ram_bytes = 100, .disk_dir = dir, .disk_bytes = 1 << 20,
                           .model_id = "m1", .snapshot_version = 3});
  const std::vector<TokenId> a = tokens(12, 10), b = tokens(12, 500);
  ASSERT_TRUE(cache->insert(std::span(a).first(8), payload(80, 0xAA)).ok());
  ASSERT_TRUE(cache->insert(std::span(b).first(4), payload(60, 0xBB)).ok());  // 140 > 100: a is parked
  EXPECT_EQ(cache->ram_lru_rows(), (std::vector<int64_t>{4}));
  EXPECT_EQ(cache->disk_lru_rows(), (std::vector<int64_t>{8}));
  // File = 48-byte header + model id (2) + 8 tokens * 4 + 80 payload bytes.
  EXPECT_EQ(cache->stats().disk_bytes, 48 + 2 + 32 + 80);
  auto hit = cache->lookup(a, 11);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->rows, 8);
  EXPECT_EQ(*hit->bytes, payload(80, 0xAA));
  // a is back in RAM; b (least recent) was parked to make room.
  EXPECT_EQ(cache->ram_lru_rows(), (std::vector<int64_t>{8}));
  EXPECT_EQ(cache->disk_lru_rows(), (std::vector<int64_t>{4}));
  EXPECT_EQ(cache->stats().restored, 1);
  EXPECT_EQ(cache->stats().parked, 2);

  // A second cache over the same directory finds b's file; another model's cache discards it.
  cache.reset();
  auto again = open_cache({.page_tokens = 4, .ram_bytes = 100, .disk_dir = dir, .disk_bytes = 1 << 20,
                           .model_id = "m1", .snapshot_version = 3});
  EXPECT_EQ(again->disk_lru_rows(), (std::vector<int64_t>{4}));
  hit = again->lookup(b, 11);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(*hit->bytes, payload(60, 0xBB));
  ASSERT_TRUE(again->insert(std::span(a).first(12), payload(90, 1)).ok());  // parks b again
  again.reset();
  auto foreign = open_cache({.page_tokens = 4, .ram_bytes = 100, .disk_dir = dir, .disk_bytes = 1 << 20,
                             .model_id = "m2", .snapshot_version = 3});
  EXPECT_EQ(foreign->stats().discarded, 1);
  EXPECT_EQ(foreign->stats().disk_entries, 0);
  EXPECT_FALSE(foreign->lookup(b, 11).has_value());
}

TEST(PromptCache, DamagedFileIsDiscardedAndAShorterEntryServes) {
  const std::string dir = temp_dir("prompt_cache_damage");
  auto cache = open_cache({.page_tokens = 4, .ram_bytes = 0, .disk_dir = dir, .disk_bytes = 1 << 20,
                           .model_id = "m", .snapshot_version = 1});
  const std::vector<TokenId> a = tokens(12, 3);
  ASSERT_TRUE(cache->insert(std::span(a).first(4), payload(16, 4)).ok());
  ASSERT_TRUE(cache->insert(std::span(a).first(8), payload(16, 8)).ok());
  EXPECT_EQ(cache->disk_lru_rows(), (std::vector<int64_t>{4, 8}));
  // Flip one payload byte of the 8-row entry (the newest file).
  fs::path newest;
  for (const auto& f : fs::directory_iterator(dir)) {
    if (f.path().filename().string().find("-8.pce") != std::string::npos) newest = f.path();
  }
  ASSERT_FALSE(newest.empty());
  {
    std::fstream file(newest, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-1, std::ios::end);
    file.put(0x7F);
  }
  auto hit = cache->lookup(a, 11);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->rows, 4);
  EXPECT_EQ(cache->stats().discarded, 1);
  EXPECT_FALSE(fs::exists(newest));
}

TEST(PromptCache, DiskCapDropsOldestFiles) {
  const std::string dir = temp_dir("prompt_cache_cap");
  // Each file: 48 + 1 (model id) + 4 tokens * 4 + 35 payload = 100 bytes; the cap holds two.
  auto cache = open_cache({.page_tokens = 4, .ram_bytes = 0, .disk_dir = dir, .disk_bytes = 250,
                           .model_id = "m", .snapshot_version = 1});
  for (TokenId base : {100, 200, 300}) ASSERT_TRUE(cache->insert(tokens(4, base), payload(35, 1)).ok());
  EXPECT_EQ(cache->stats().disk_bytes, 200);
  EXPECT_FALSE(cache->contains(tokens(4, 100)));
  EXPECT_TRUE(cache->contains(tokens(4, 200)));
  EXPECT_TRUE(cache->contains(tokens(4, 300)));
  EXPECT_EQ(cache->stats().dropped, 1);
}

}  // namespace
}  // namespace dsv4::cache
