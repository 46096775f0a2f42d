// Prompt cache bookkeeping with exact expectations: trie lookups, LRU eviction order, disk park/restore, discards.
#include "cache/prompt_cache.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace dsv4::cache {
namespace {
namespace fs = std::filesystem;

std::vector<Key> tokens(int64_t n, Key base) {
  std::vector<Key> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(base + static_cast<Key>(i));
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
  const std::vector<Key> t = tokens(20, 100);
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
  std::vector<Key> other = t;
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
  const std::vector<Key> a = tokens(8, 0), b = tokens(8, 50), c = tokens(8, 90);
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
  const std::vector<Key> a = tokens(12, 10), b = tokens(12, 500);
  ASSERT_TRUE(cache->insert(std::span(a).first(8), payload(80, 0xAA)).ok());
  ASSERT_TRUE(cache->insert(std::span(b).first(4), payload(60, 0xBB)).ok());  // 140 > 100: a is parked
  EXPECT_EQ(cache->ram_lru_rows(), (std::vector<int64_t>{4}));
  EXPECT_EQ(cache->disk_lru_rows(), (std::vector<int64_t>{8}));
  // File = 48-byte header + model id (2) + 8 keys * 8 + 80 payload bytes.
  EXPECT_EQ(cache->stats().disk_bytes, 48 + 2 + 64 + 80);
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
  const std::vector<Key> a = tokens(12, 3);
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
  // Each file: 48 + 1 (model id) + 4 keys * 8 + 35 payload = 116 bytes; the cap holds two.
  auto cache = open_cache({.page_tokens = 4, .ram_bytes = 0, .disk_dir = dir, .disk_bytes = 250,
                           .model_id = "m", .snapshot_version = 1});
  for (Key base : {100, 200, 300}) ASSERT_TRUE(cache->insert(tokens(4, base), payload(35, 1)).ok());
  EXPECT_EQ(cache->stats().disk_bytes, 232);
  EXPECT_FALSE(cache->contains(tokens(4, 100)));
  EXPECT_TRUE(cache->contains(tokens(4, 200)));
  EXPECT_TRUE(cache->contains(tokens(4, 300)));
  EXPECT_EQ(cache->stats().dropped, 1);
}

// Split snapshots. Geometry for these tests: table 0 has one 4-byte row per position, table 1 one 2-byte row per
// 3 positions; row i of a table is filled with a byte derived from (table, i) so concatenations can be checked.
const std::vector<RowTableShape> kTables = {{1, 4}, {3, 2}};

uint8_t row_byte(size_t table, int64_t row) { return static_cast<uint8_t>(17 * table + 3 * row + 1); }

// Table t's rows for positions [from, end).
Bytes table_rows(size_t t, int64_t from, int64_t end) {
  Bytes out;
  const RowTableShape& shape = kTables[t];
  for (int64_t row = from / shape.positions_per_row; row < end / shape.positions_per_row; ++row) {
    out.insert(out.end(), static_cast<size_t>(shape.row_bytes), row_byte(t, row));
  }
  return out;
}

std::vector<Bytes> parts_rows(int64_t from, int64_t end) { return {table_rows(0, from, end), table_rows(1, from, end)}; }

// The concatenation of a hit's chunks of table t.
Bytes joined(const CacheHit& hit, size_t t) {
  Bytes out;
  for (std::span<const uint8_t> chunk : hit.tables[t]) out.insert(out.end(), chunk.begin(), chunk.end());
  return out;
}

TEST(PromptCacheSplit, AncestorsShareRowPagesCountedOnce) {
  auto cache = open_cache({.page_tokens = 4, .ram_bytes = 1 << 20, .row_tables = kTables});
  const std::vector<Key> a = tokens(16, 10);
  // Page bytes: [0,4) 4*4 + 1*2 = 18, [4,8) 16 + (2-1)*2 = 18, [8,12) 16 + (4-2)*2 = 20.
  EXPECT_EQ(cache->page_bytes(0, 4), 18);
  EXPECT_EQ(cache->page_bytes(4, 8), 18);
  EXPECT_EQ(cache->page_bytes(8, 12), 20);
  for (int64_t end : {4, 8, 12}) {
    const auto prefix = std::span(a).first(static_cast<size_t>(end));
    EXPECT_EQ(cache->shared_rows(prefix), end - 4);
    ASSERT_TRUE(cache->insert_parts(prefix, payload(10, static_cast<uint8_t>(end)), end - 4, parts_rows(end - 4, end)).ok());
  }
  EXPECT_EQ(cache->stats().ram_bytes, 3 * 10 + 18 + 18 + 20);
  EXPECT_EQ(cache->stats().ram_pages, 3);
  EXPECT_EQ(cache->page_users(std::span(a).first(4)), 3);
  EXPECT_EQ(cache->page_users(std::span(a).first(8)), 2);
  EXPECT_EQ(cache->page_users(std::span(a).first(12)), 1);
  // Rows that do not start where the held pages end, or of the wrong size, are refused.
  EXPECT_FALSE(cache->insert_parts(std::span(a).first(16), payload(10, 1), 16, parts_rows(16, 16)).ok());
  EXPECT_FALSE(cache->insert_parts(std::span(a).first(16), payload(10, 1), 12, parts_rows(8, 16)).ok());
  EXPECT_FALSE(cache->insert(std::span(a).first(16), payload(10, 1)).ok());  // whole snapshots: not here

  auto hit = cache->lookup(a, 15);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->rows, 12);
  EXPECT_EQ(*hit->bytes, payload(10, 12));
  EXPECT_EQ(joined(*hit, 0), table_rows(0, 0, 12));
  EXPECT_EQ(joined(*hit, 1), table_rows(1, 0, 12));
  EXPECT_EQ(hit->tables[0].size(), 3u);

  // A branch sharing the first page adds its own page [4,8) (18 bytes) and a bounded part.
  std::vector<Key> b = a;
  b[5] = 999;
  EXPECT_EQ(cache->shared_rows(std::span(b).first(8)), 4);
  ASSERT_TRUE(cache->insert_parts(std::span(b).first(8), payload(10, 88), 4, parts_rows(4, 8)).ok());
  EXPECT_EQ(cache->stats().ram_bytes, 4 * 10 + 18 + 18 + 20 + 18);
  EXPECT_EQ(cache->page_users(std::span(a).first(4)), 4);

  // Discarding a's deepest entry frees its bounded part and the page only it used.
  cache->discard(std::span(a).first(12));
  EXPECT_EQ(cache->stats().ram_bytes, 3 * 10 + 18 + 18 + 18);
  EXPECT_EQ(cache->page_users(std::span(a).first(8)), 1);
}

TEST(PromptCacheSplit, EvictionFreesAPageWithItsLastUser) {
  // Budget 100; a at 4, 8, 12 take 86; b at 8 adds 28 (114): a4 goes (frees 10: its page is shared), then a8
  // (frees 10 more: 94). Left: a12 and b8, pages [0,4) used by both.
  auto cache = open_cache({.page_tokens = 4, .ram_bytes = 100, .row_tables = kTables});
  const std::vector<Key> a = tokens(16, 10);
  std::vector<Key> b = a;
  b[6] = 999;
  for (int64_t end : {4, 8, 12}) {
    ASSERT_TRUE(cache->insert_parts(std::span(a).first(static_cast<size_t>(end)), payload(10, 1), end - 4,
                                    parts_rows(end - 4, end)).ok());
  }
  ASSERT_TRUE(cache->insert_parts(std::span(b).first(8), payload(10, 2), 4, parts_rows(4, 8)).ok());
  EXPECT_EQ(cache->ram_lru_rows(), (std::vector<int64_t>{12, 8}));
  EXPECT_EQ(cache->stats().dropped, 2);
  EXPECT_EQ(cache->stats().ram_bytes, 2 * 10 + 18 + 18 + 20 + 18);
  EXPECT_EQ(cache->page_users(std::span(a).first(4)), 2);
  EXPECT_EQ(cache->page_users(std::span(a).first(8)), 1);
  EXPECT_EQ(cache->page_users(std::span(b).first(8)), 1);
  // Touch a12, then a new entry c at 4 on another first page (10 + 18): b8 (least recent) goes with its page.
  ASSERT_TRUE(cache->lookup(a, 15).has_value());
  const std::vector<Key> c = tokens(4, 500);
  ASSERT_TRUE(cache->insert_parts(c, payload(10, 3), 0, parts_rows(0, 4)).ok());
  EXPECT_EQ(cache->ram_lru_rows(), (std::vector<int64_t>{12, 4}));
  EXPECT_EQ(cache->stats().ram_bytes, 10 + 18 + 18 + 20 + 10 + 18);
  EXPECT_EQ(cache->page_users(std::span(a).first(4)), 1);
  EXPECT_EQ(cache->stats().ram_pages, 4);
}

TEST(PromptCacheSplit, DiskTierParksPagesOnceAndRestoresThem) {
  const std::string dir = temp_dir("prompt_cache_split");
  const PromptCacheOptions options{.page_tokens = 4, .ram_bytes = 0, .disk_dir = dir, .disk_bytes = 1 << 20,
                                   .model_id = "m", .snapshot_version = 2, .row_tables = kTables};
  auto cache = open_cache(options);
  const std::vector<Key> a = tokens(12, 10);
  ASSERT_TRUE(cache->insert_parts(std::span(a).first(4), payload(10, 4), 0, parts_rows(0, 4)).ok());
  // Parked at once: the page has no RAM copy left, so the next entry brings rows from 0.
  EXPECT_EQ(cache->shared_rows(std::span(a).first(8)), 0);
  ASSERT_TRUE(cache->insert_parts(std::span(a).first(8), payload(10, 8), 0, parts_rows(0, 8)).ok());
  // Files: entries 48 + 1 + 8 * rows + 10; pages 56 + 1 + 18, each written once.
  EXPECT_EQ(cache->stats().disk_pages, 2);
  EXPECT_EQ(cache->stats().disk_bytes, (48 + 1 + 32 + 10) + (48 + 1 + 64 + 10) + 2 * (56 + 1 + 18));
  EXPECT_EQ(cache->stats().ram_bytes, 0);
  auto hit = cache->lookup(a, 11);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->rows, 8);
  EXPECT_EQ(*hit->bytes, payload(10, 8));
  EXPECT_EQ(joined(*hit, 0), table_rows(0, 0, 8));
  EXPECT_EQ(joined(*hit, 1), table_rows(1, 0, 8));
  EXPECT_EQ(cache->disk_lru_rows(), (std::vector<int64_t>{4, 8}));  // parked again (RAM budget 0)

  // Reopened: entries and pages are found again; an orphan page file is removed.
  cache.reset();
  {
    std::ofstream orphan(fs::path(dir) / "0123456789abcdef-40.pcr", std::ios::binary);
    orphan << "not a page";
  }
  auto again = open_cache(options);
  EXPECT_EQ(again->stats().disk_entries, 2);
  EXPECT_EQ(again->stats().disk_pages, 2);
  EXPECT_FALSE(fs::exists(fs::path(dir) / "0123456789abcdef-40.pcr"));
  hit = again->lookup(a, 11);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(joined(*hit, 0), table_rows(0, 0, 8));

  // A missing page file: the entries needing it are discarded when the cache opens.
  again.reset();
  for (const auto& f : fs::directory_iterator(dir)) {
    if (f.path().filename().string().ends_with("-8.pcr")) fs::remove(f.path());
  }
  auto third = open_cache(options);
  EXPECT_EQ(third->stats().discarded, 1);
  EXPECT_EQ(third->disk_lru_rows(), (std::vector<int64_t>{4}));
  EXPECT_EQ(third->stats().disk_pages, 1);

  // A damaged page: the entry is discarded on lookup, its files go, nothing is left.
  for (const auto& f : fs::directory_iterator(dir)) {
    if (!f.path().filename().string().ends_with("-4.pcr")) continue;
    std::fstream file(f.path(), std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-1, std::ios::end);
    file.put(0x7F);
  }
  EXPECT_FALSE(third->lookup(a, 11).has_value());
  EXPECT_EQ(third->stats().discarded, 2);
  EXPECT_EQ(third->stats().disk_bytes, 0);
  EXPECT_EQ(third->stats().disk_pages, 0);
  EXPECT_TRUE(fs::is_empty(dir));
}

}  // namespace
}  // namespace dsv4::cache
