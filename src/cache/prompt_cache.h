// The prompt cache: a prefix trie over fixed-size token pages holding opaque stream snapshots, RAM LRU + disk tier.
//
// A prompt is looked up by its keys, one per position: a text position's token id, an image position's key from the
// image's content digest and its offset in the span (lanes/prompt_keys.h), so image positions, which all carry one
// token id, share a cached prefix only with the same image.
//
// Entries sit at page boundaries (rows % page_tokens == 0). Lookup returns the longest entry that prefixes a
// prompt. RAM entries past the byte budget are evicted least recently used first; with a disk tier they are
// parked as files (checked by model id, snapshot version, tokens and an xxh3 checksum when read back) and
// restored on a later hit; a damaged or foreign file is discarded. Used from one thread (the engine's).
//
// Split snapshots (options.row_tables non-empty): an entry holds only the backend's bounded part; the append-only
// table rows live in row pages, one per trie node, holding the rows that node's token page added to every table.
// An entry at page k uses the row pages of nodes 1..k, shared with every other entry on that path and counted by
// reference (RAM entries and disk entries apart), so a page's bytes are held — and counted in the budgets — once,
// and freed when the last entry using them goes. A page is in RAM while a RAM entry uses it and in a file (.pcr)
// while a parked entry does; a hit reads the missing pages back and checks each one. A damaged or missing page file
// discards the entry that needed it.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace dsv4::cache {

// One prompt position's key: a token id (0 .. 2^31 - 1), or a key with the top bit set for a position fed as given
// embedding rows (lanes/prompt_keys.h).
using Key = uint64_t;

// The keys of a text-only prompt: its token ids.
inline std::vector<Key> token_keys(std::span<const int32_t> tokens) {
  std::vector<Key> keys;
  keys.reserve(tokens.size());
  for (int32_t t : tokens) keys.push_back(static_cast<Key>(static_cast<uint32_t>(t)));
  return keys;
}
using Bytes = std::vector<uint8_t>;

// One append-only table of split snapshots (lanes::RowTable's geometry): rows at n positions = n / positions_per_row.
struct RowTableShape {
  int32_t positions_per_row = 1;
  int64_t row_bytes = 0;
};

struct PromptCacheOptions {
  int32_t page_tokens = 64;        // trie page size; entries only at multiples of it
  int64_t ram_bytes = 256 << 20;   // budget for snapshot bytes held in RAM
  std::string disk_dir;            // disk tier directory; empty = no disk tier
  int64_t disk_bytes = 0;          // disk tier cap (file bytes)
  std::string model_id;            // identity written into and checked on every disk entry
  uint32_t snapshot_version = 0;   // snapshot format written into and checked on every disk entry
  std::vector<RowTableShape> row_tables;  // the backend's row tables (BackendInfo::row_tables); empty = whole
                                          // snapshots (insert), else split ones (insert_parts)
};

struct CacheHit {
  int64_t rows = 0;                         // prompt rows the snapshot holds
  std::shared_ptr<const Bytes> bytes;       // the backend's snapshot (split: its bounded part)
  // Split snapshots: per table, its rows [0, rows / ppr) as one chunk per row page in order; the spans point into
  // `pages`, which keeps them alive as long as the hit.
  std::vector<std::vector<std::span<const uint8_t>>> tables;
  std::vector<std::shared_ptr<const Bytes>> pages;
};

struct PromptCacheStats {
  int64_t lookups = 0;       // lookup calls
  int64_t hits = 0;          // lookups that returned an entry
  int64_t hit_rows = 0;      // rows returned by hits
  int64_t inserts = 0;       // entries added
  int64_t parked = 0;        // RAM entries written to disk on eviction
  int64_t dropped = 0;       // entries removed by a budget (RAM without disk tier, or disk cap)
  int64_t restored = 0;      // disk entries read back on a hit
  int64_t discarded = 0;     // entries found damaged or foreign and removed
  int64_t ram_bytes = 0;     // snapshot bytes in RAM now
  int64_t disk_bytes = 0;    // file bytes on disk now
  int64_t ram_entries = 0;
  int64_t disk_entries = 0;
  int64_t ram_pages = 0;       // row pages in RAM (split snapshots); their bytes are in ram_bytes
  int64_t disk_pages = 0;      // row page files; their bytes are in disk_bytes
  int64_t ram_page_bytes = 0;  // the part of ram_bytes held by row pages
};

class PromptCache {
 public:
  // Opens the cache; with a disk tier, creates the directory and indexes its valid entries (others discarded).
  static StatusOr<std::unique_ptr<PromptCache>> open(PromptCacheOptions options);
  ~PromptCache();

  int32_t page_tokens() const { return options_.page_tokens; }
  const std::vector<RowTableShape>& row_tables() const { return options_.row_tables; }
  // The longest entry prefixing `tokens` with rows <= max_rows; a disk entry is read, checked and moved to RAM.
  std::optional<CacheHit> lookup(std::span<const Key> tokens, int64_t max_rows);
  // Whether an entry for exactly this prefix exists (RAM or disk); does not touch recency.
  bool contains(std::span<const Key> prefix) const;
  // Adds (or replaces) the entry for `prefix` (size a positive multiple of page_tokens), then applies budgets.
  // Whole snapshots only (no row tables).
  Status insert(std::span<const Key> prefix, Bytes bytes);
  // Split snapshots: the rows (a page multiple) up to which `prefix`'s row pages are already in RAM — the `from` to
  // ask the backend's snapshot_parts for.
  int64_t shared_rows(std::span<const Key> prefix) const;
  // Adds (or replaces) the entry for `prefix` from a split snapshot: `bounded`, and per table its rows from position
  // `from` (<= shared_rows(prefix), a page multiple) to prefix.size(); they fill the row pages not yet in RAM.
  Status insert_parts(std::span<const Key> prefix, Bytes bounded, int64_t from, const std::vector<Bytes>& rows);
  // Removes the entry for exactly this prefix (its snapshot proved unusable); counts as discarded.
  void discard(std::span<const Key> prefix);
  PromptCacheStats stats() const { return stats_; }
  // Entries' row counts from least to most recently used, RAM then disk (for tests and diagnostics).
  std::vector<int64_t> ram_lru_rows() const;
  std::vector<int64_t> disk_lru_rows() const;
  // Entries (RAM + disk) using the row page that ends at `prefix` (its last page); 0 when it has none.
  int32_t page_users(std::span<const Key> prefix) const;
  // Bytes one row page holds for positions [first, end) (all tables; split snapshots).
  int64_t page_bytes(int64_t first, int64_t end) const;

 private:
  struct Node;
  struct Entry;
  explicit PromptCache(PromptCacheOptions options);
  Node* find_node(std::span<const Key> prefix) const;
  Node* make_path(std::span<const Key> prefix);
  void prune(Node* node);
  void remove_entry(Node* node);
  // Makes `bytes` the node's RAM entry (newest in the LRU), counts it and applies the budgets.
  void add_ram_entry(Node* node, Bytes bytes);
  void touch(Node* node);
  void apply_budgets();
  Status park(Node* node);
  StatusOr<Bytes> read_parked(Node* node, std::span<const Key> prefix);
  Status index_disk();
  void index_pages();
  std::string file_path(const Node* node) const;
  std::string page_path(const Node* node) const;
  // Row pages (split snapshots): reference counting along an entry's path, files, reads.
  bool split() const { return !options_.row_tables.empty(); }
  void hold_ram_pages(Node* node);
  void drop_ram_pages(Node* node);
  void drop_disk_pages(Node* node);
  void remove_page_file(Node* node);
  Status write_page(Node* node);
  StatusOr<Bytes> read_page(const Node* node) const;
  std::optional<CacheHit> hit_of(Node* node);
  std::vector<Key> node_tokens(const Node* node) const;

  PromptCacheOptions options_;
  std::unique_ptr<Node> root_;
  std::list<Node*> ram_lru_;   // least recently used first
  std::list<Node*> disk_lru_;  // least recently used first
  PromptCacheStats stats_;
};

}  // namespace dsv4::cache
