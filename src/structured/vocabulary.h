// A tokenizer's tokens as byte strings, in a trie: the walk that builds a token mask visits each shared prefix once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lanes/sampling.h"
#include "lanes/token_mask.h"

namespace dsv4::structured {

using lanes::TokenId;

// Tokens in a trie: node 0 is the root; node n's edges are [edge_begin[n], edge_begin[n + 1]), ascending by byte; the
// tokens spelled by the path to node n are term_ids[term_begin[n], term_begin[n + 1]).
struct TokenTrie {
  std::vector<uint32_t> edge_begin, edge_child, term_begin;
  std::vector<uint8_t> edge_byte;
  std::vector<TokenId> term_ids;
  // Built from `ids` (each with bytes[id] non-empty).
  static TokenTrie build(const std::vector<std::string>& bytes, std::vector<TokenId> ids);
};

class Vocabulary {
 public:
  // bytes[id]: what token id writes; usable[id] false for tokens a constraint never allows (special tokens, and any
  // token that writes nothing).
  Vocabulary(std::vector<std::string> bytes, std::vector<bool> usable);

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  const std::string& bytes(TokenId id) const { return bytes_[static_cast<size_t>(id)]; }
  bool usable(TokenId id) const { return id >= 0 && id < size() && usable_[static_cast<size_t>(id)]; }
  size_t max_token_bytes() const { return max_len_; }

  // Every usable token.
  const TokenTrie& trie() const { return all_; }

  // String-plain tokens: whole UTF-8 characters, none a quote, a backslash or a control character. Inside a JSON
  // string (between characters) such a token only adds its code points, whatever encloses the string.
  // plain_within(k): the string-plain tokens of at most k code points; rest(): the trie of every other usable token.
  const lanes::TokenMask& plain_within(int64_t k) const {
    return plain_upto_[static_cast<size_t>(k < 0 || k >= static_cast<int64_t>(plain_upto_.size())
                                               ? plain_upto_.size() - 1
                                               : k)];
  }
  const TokenTrie& rest() const { return rest_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<bool> usable_;
  size_t max_len_ = 0;
  TokenTrie all_, rest_;
  std::vector<lanes::TokenMask> plain_upto_;  // [k]: string-plain tokens of at most k code points
};

}  // namespace dsv4::structured
