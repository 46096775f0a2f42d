// Per-thread cache of BPE results for short pre-tokens (no locks; direct-mapped, overwrite on clash).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string_view>
#include <vector>

#include "tokenizer/bpe.h"

namespace dsv4 {

// Each thread keeps one table for the tokenizer it used last (identified by `owner`, a process-
// unique number, never an address that could be reused). Switching tokenizers clears it.
class WordCache {
 public:
  static constexpr size_t kMaxBytes = 22, kMaxIds = 8;

  static uint64_t new_owner() {
    static std::atomic<uint64_t> next{1};
    return next.fetch_add(1);
  }

  // The cached ids of `piece`, or false.
  static bool find(uint64_t owner, std::string_view piece, std::vector<TokenId>& out) {
    if (piece.size() > kMaxBytes) return false;
    Table& t = table(owner);
    const uint64_t h = std::hash<std::string_view>()(piece);
    const Slot& s = t.slots[h & kMask];
    if (s.hash != h || s.len != piece.size() || std::memcmp(s.bytes, piece.data(), piece.size()) != 0) return false;
    out.insert(out.end(), s.ids, s.ids + s.n_ids);
    return true;
  }

  static void put(uint64_t owner, std::string_view piece, const TokenId* ids, size_t n) {
    if (piece.size() > kMaxBytes || n > kMaxIds) return;
    Table& t = table(owner);
    const uint64_t h = std::hash<std::string_view>()(piece);
    Slot& s = t.slots[h & kMask];
    s.hash = h;
    s.len = static_cast<uint8_t>(piece.size());
    s.n_ids = static_cast<uint8_t>(n);
    std::memcpy(s.bytes, piece.data(), piece.size());
    std::memcpy(s.ids, ids, n * sizeof(TokenId));
  }

 private:
  static constexpr size_t kSlots = 1 << 14;  // 16384 x 64 B = 1 MiB per thread
  static constexpr uint64_t kMask = kSlots - 1;
  struct Slot {
    uint64_t hash = 0;
    uint8_t len = 0xFF;  // no piece has this length: the slot is empty
    uint8_t n_ids = 0;
    char bytes[kMaxBytes];
    TokenId ids[kMaxIds];
  };
  static_assert(sizeof(Slot) == 64);
  struct Table {
    uint64_t owner = 0;
    std::vector<Slot> slots;
  };
  static Table& table(uint64_t owner) {
    thread_local Table t;
    if (t.owner != owner) {
      t.slots.assign(kSlots, Slot{});
      t.owner = owner;
    }
    return t;
  }
};

}  // namespace dsv4
