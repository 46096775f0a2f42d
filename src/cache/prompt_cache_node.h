// The prompt cache's trie node and entry (private to the cache module's sources).
#pragma once

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <list>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "cache/prompt_cache.h"

namespace dsv4::cache {

inline uint64_t hash_tokens(std::span<const Key> tokens) { return XXH3_64bits(tokens.data(), tokens.size_bytes()); }

struct PromptCache::Entry {
  bool on_disk = false;
  std::shared_ptr<const Bytes> bytes;  // RAM tier only
  int64_t size = 0;                    // RAM: snapshot bytes; disk: file bytes
  std::list<Node*>::iterator lru;      // in ram_lru_ or disk_lru_
};

struct PromptCache::Node {
  Node* parent = nullptr;
  uint64_t key = 0;                  // xxh3 of `page`, the key in parent->children
  std::vector<Key> page;         // this node's page (empty at the root)
  int64_t rows = 0;                  // prefix length ending with this page
  uint64_t chain = 0;                // digest of the whole prefix: xxh3(page, seed = parent's chain)
  std::unordered_map<uint64_t, std::unique_ptr<Node>> children;
  std::unique_ptr<Entry> entry;
  // Row page (split snapshots): the rows this page added to every table, in table order.
  std::shared_ptr<const Bytes> page_rows;  // in RAM exactly while ram_users > 0
  int32_t ram_users = 0;                   // RAM entries at or below this node
  int32_t disk_users = 0;                  // parked entries at or below this node
  int64_t page_file_size = 0;              // bytes of its .pcr file; 0 = none
};

// The nodes from the root's child down to `node`.
template <typename N>
inline std::vector<N*> path_to(N* node) {
  std::vector<N*> path;
  for (N* n = node; n->parent != nullptr; n = n->parent) path.push_back(n);
  std::reverse(path.begin(), path.end());
  return path;
}

}  // namespace dsv4::cache
