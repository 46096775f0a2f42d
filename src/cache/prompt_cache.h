// The prompt cache: a prefix trie over fixed-size token pages holding opaque stream snapshots, RAM LRU + disk tier.
//
// Entries sit at page boundaries (rows % page_tokens == 0). Lookup returns the longest entry that prefixes a
// prompt. RAM entries past the byte budget are evicted least recently used first; with a disk tier they are
// parked as files (checked by model id, snapshot version, tokens and an xxh3 checksum when read back) and
// restored on a later hit; a damaged or foreign file is discarded. Used from one thread (the engine's).
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

using TokenId = int32_t;
using Bytes = std::vector<uint8_t>;

struct PromptCacheOptions {
  int32_t page_tokens = 64;        // trie page size; entries only at multiples of it
  int64_t ram_bytes = 256 << 20;   // budget for snapshot bytes held in RAM
  std::string disk_dir;            // disk tier directory; empty = no disk tier
  int64_t disk_bytes = 0;          // disk tier cap (file bytes)
  std::string model_id;            // identity written into and checked on every disk entry
  uint32_t snapshot_version = 0;   // snapshot format written into and checked on every disk entry
};

struct CacheHit {
  int64_t rows = 0;                         // prompt rows the snapshot holds
  std::shared_ptr<const Bytes> bytes;       // the backend's snapshot
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
};

class PromptCache {
 public:
  // Opens the cache; with a disk tier, creates the directory and indexes its valid entries (others discarded).
  static StatusOr<std::unique_ptr<PromptCache>> open(PromptCacheOptions options);
  ~PromptCache();

  int32_t page_tokens() const { return options_.page_tokens; }
  // The longest entry prefixing `tokens` with rows <= max_rows; a disk entry is read, checked and moved to RAM.
  std::optional<CacheHit> lookup(std::span<const TokenId> tokens, int64_t max_rows);
  // Whether an entry for exactly this prefix exists (RAM or disk); does not touch recency.
  bool contains(std::span<const TokenId> prefix) const;
  // Adds (or replaces) the entry for `prefix` (size a positive multiple of page_tokens), then applies budgets.
  Status insert(std::span<const TokenId> prefix, Bytes bytes);
  // Removes the entry for exactly this prefix (its snapshot proved unusable); counts as discarded.
  void discard(std::span<const TokenId> prefix);
  PromptCacheStats stats() const { return stats_; }
  // Entries' row counts from least to most recently used, RAM then disk (for tests and diagnostics).
  std::vector<int64_t> ram_lru_rows() const;
  std::vector<int64_t> disk_lru_rows() const;

 private:
  struct Node;
  struct Entry;
  explicit PromptCache(PromptCacheOptions options);
  Node* find_node(std::span<const TokenId> prefix) const;
  Node* make_path(std::span<const TokenId> prefix);
  void prune(Node* node);
  void remove_entry(Node* node);
  void touch(Node* node);
  void apply_budgets();
  Status park(Node* node);
  StatusOr<Bytes> read_parked(Node* node, std::span<const TokenId> prefix);
  Status index_disk();
  std::string file_path(const Node* node) const;
  std::vector<TokenId> node_tokens(const Node* node) const;

  PromptCacheOptions options_;
  std::unique_ptr<Node> root_;
  std::list<Node*> ram_lru_;   // least recently used first
  std::list<Node*> disk_lru_;  // least recently used first
  PromptCacheStats stats_;
};

}  // namespace dsv4::cache
