// Added tokens (specials and control tokens): cut out of the text before pre-tokenization.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/regex.h"

namespace dsv4 {

// One entry of tokenizer.json "added_tokens" (defaults as in `tokenizers`).
struct AddedToken {
  TokenId id = 0;
  std::string content;
  bool special = false;      // dropped by decode(skip_special_tokens)
  bool normalized = true;    // matched on normalized text (else on the raw text, first);
                             // tokenizer.json entries without the flag get !special
  bool lstrip = false;       // swallows whitespace on its left
  bool rstrip = false;       // swallows whitespace on its right
  bool single_word = false;  // only matches when not inside a word
};

// Leftmost-longest matching of a set of literal strings, with the single_word/lstrip/rstrip
// rules of `tokenizers` AddedVocabulary::find_matches.
class AddedTokenMatcher {
 public:
  AddedTokenMatcher() { root_.fill(-1); }
  // `patterns[i]` is what tokens[i] looks like in the text it will be matched against.
  void build(const std::vector<const AddedToken*>& tokens, const std::vector<std::string>& patterns);
  bool empty() const { return tokens_.empty(); }

  struct Segment {
    Span span;
    TokenId id;  // -1: plain text to pass on
  };
  // Splits `text` into added-token segments and the plain text between them (non-empty only).
  void split(std::string_view text, std::vector<Segment>& out) const;

 private:
  struct Node {
    int32_t token = -1;  // index into tokens_ when a pattern ends here
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
  };
  int32_t child(int32_t node, uint8_t b) const;
  std::vector<Node> nodes_;
  std::vector<const AddedToken*> tokens_;
  std::array<int32_t, 256> root_{};  // child of the root per first byte, -1 when none
};

}  // namespace dsv4
