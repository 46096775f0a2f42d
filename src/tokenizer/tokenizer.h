// Tokenizer: text <-> token ids for a Hugging Face tokenizer.json (byte-level BPE).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe.h"

namespace dsv4 {

// Immutable after loading; copies share the data; encode/decode are safe from many threads.
//
// Pipeline (as `tokenizers`): added tokens with normalized=false are cut out of the raw text;
// the rest is normalized; added tokens with normalized=true are cut out of that; each remaining
// part goes through the pre-tokenizer (Split regexes, ByteLevel) and BPE. No post-processor
// template is applied: encode() never adds BOS/EOS (the chat encoder writes them as text).
class Tokenizer {
 public:
  // Errors name the problem: JSON syntax (line/column), the section and entry at fault.
  static StatusOr<Tokenizer> from_json(std::string_view json_text);
  static StatusOr<Tokenizer> from_json_file(const std::string& path);

  // Invalid UTF-8 in `text` is first replaced by U+FFFD per maximal subpart (what a caller that
  // lossily decodes bytes into a string would pass to `tokenizers`).
  std::vector<TokenId> encode(std::string_view text) const;
  void encode(std::string_view text, std::vector<TokenId>& out) const;  // appends

  // UTF-8 text of `ids` (byte-level reverse; incomplete or invalid bytes become U+FFFD).
  // Fails on an id that names no token.
  StatusOr<std::string> decode(std::span<const TokenId> ids, bool skip_special_tokens = false) const;

  // The raw bytes one token stands for (may be part of a UTF-8 character); nullopt for unknown ids.
  std::optional<std::string_view> token_bytes(TokenId id) const;
  // The token as spelled in tokenizer.json (alphabet form for BPE entries, content for added ones).
  std::optional<std::string_view> id_to_token(TokenId id) const;
  // Inverse of id_to_token (added-token contents take precedence).
  std::optional<TokenId> token_to_id(std::string_view token) const;

  // One past the largest id (vocab and added tokens); some ids below it may name no token.
  int32_t vocab_size() const;
  int32_t base_vocab_size() const;  // entries of the BPE vocab
  size_t merge_count() const;
  const std::vector<AddedToken>& added_tokens() const;
  const AddedToken* added_token(TokenId id) const;  // nullptr for BPE ids
  bool is_special(TokenId id) const;

  struct Impl;  // tokenizer.cc

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace dsv4
