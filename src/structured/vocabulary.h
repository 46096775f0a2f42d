// A tokenizer's tokens as byte strings, in a trie: the walk that builds a token mask visits each shared prefix once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lanes/sampling.h"

namespace dsv4::structured {

using lanes::TokenId;

class Vocabulary {
 public:
  // bytes[id]: what token id writes; usable[id] false for tokens a constraint never allows (special tokens, and any
  // token that writes nothing).
  Vocabulary(std::vector<std::string> bytes, std::vector<bool> usable);

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  const std::string& bytes(TokenId id) const { return bytes_[static_cast<size_t>(id)]; }
  bool usable(TokenId id) const { return id >= 0 && id < size() && usable_[static_cast<size_t>(id)]; }
  size_t max_token_bytes() const { return max_len_; }

  // The trie: node 0 is the root; node n's edges are [edge_begin[n], edge_begin[n + 1]), ascending by byte; the
  // tokens spelled by the path to node n are term_ids[term_begin[n], term_begin[n + 1]).
  uint32_t nodes() const { return static_cast<uint32_t>(edge_begin_.size() - 1); }
  uint32_t edge_begin(uint32_t n) const { return edge_begin_[n]; }
  uint8_t edge_byte(uint32_t e) const { return edge_byte_[e]; }
  uint32_t edge_child(uint32_t e) const { return edge_child_[e]; }
  uint32_t term_begin(uint32_t n) const { return term_begin_[n]; }
  TokenId term_id(uint32_t i) const { return term_ids_[i]; }

 private:
  std::vector<std::string> bytes_;
  std::vector<bool> usable_;
  size_t max_len_ = 0;
  std::vector<uint32_t> edge_begin_, edge_child_, term_begin_;
  std::vector<uint8_t> edge_byte_;
  std::vector<TokenId> term_ids_;
};

}  // namespace dsv4::structured
