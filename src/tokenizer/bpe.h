// Byte-level BPE model: vocabulary, merge ranks, and the merge loop over one pre-token's bytes.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace dsv4 {

using TokenId = int32_t;

class BpeModel {
 public:
  // Parses tokenizer.json "model" ({"type":"BPE", vocab, merges, ...}). Merges may be "a b"
  // strings or ["a","b"] pairs. Refuses what would change ids silently: byte_fallback, dropout,
  // subword prefixes/suffixes, a vocab without all 256 byte symbols, merges naming unknown tokens.
  static StatusOr<BpeModel> from_json(const nlohmann::json& model);

  // Appends the ids of one pre-token (raw bytes): bytes become their alphabet symbols, then the
  // lowest-ranked adjacent pair is merged until none is left (ties: leftmost first), exactly as
  // `tokenizers` Word::merge_all does.
  void encode_word(std::string_view bytes, std::vector<TokenId>& out) const;

  BpeModel() = default;
  BpeModel(BpeModel&&) = default;  // moves keep the vector buffer that token_to_id_ points into
  BpeModel& operator=(BpeModel&&) = default;
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // Vocab entries as written in tokenizer.json (alphabet form), indexed by id; "" for holes.
  const std::vector<std::string>& id_to_token() const { return id_to_token_; }
  std::optional<TokenId> find(std::string_view token) const;
  size_t vocab_entries() const { return token_to_id_.size(); }
  size_t merge_count() const { return merge_count_; }

 private:
  struct Merge {
    uint32_t rank = 0;
    TokenId merged = 0;
  };
  static uint64_t pair_key(TokenId a, TokenId b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void merge_all(std::string_view bytes, std::vector<TokenId>& out) const;

  std::vector<std::string> id_to_token_;
  std::unordered_map<std::string_view, TokenId> token_to_id_;  // views into id_to_token_
  std::unordered_map<std::string, TokenId> bytes_to_id_;       // raw-byte form (ignore_merges only)
  // (left id, right id) -> rank, result: open addressing, linear probing, load <= 1/2.
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge{};
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  const Merge* find_merge(TokenId a, TokenId b) const;
  void insert_merge(uint64_t key, Merge m);
  std::vector<Slot> merge_table_;
  uint64_t merge_mask_ = 0;
  int merge_shift_ = 64;  // 64 - log2(table size): Fibonacci hashing keeps the top bits
  size_t merge_count_ = 0;
  std::array<TokenId, 256> byte_ids_{};
  bool ignore_merges_ = false;
};

}  // namespace dsv4
