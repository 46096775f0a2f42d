// Streaming detokenizer: token ids in, only complete UTF-8 text out (for server deltas).
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {

// Byte stream -> text that is final: a trailing sequence that may still complete is held back;
// ill-formed bytes become U+FFFD per maximal subpart as soon as they are known to be ill-formed.
// Invariant: the concatenation of all push() results and finish() equals utf8::repair(all bytes).
class Utf8Stream {
 public:
  std::string push(std::string_view bytes);
  std::string finish();  // held-back bytes (an unfinished sequence) become one U+FFFD
  size_t held_bytes() const { return held_.size(); }

 private:
  std::string held_;  // at most 3 bytes: a proper prefix of a well-formed sequence
};

// Ids -> text deltas. Invariant: the concatenation of all push() results and finish() equals
// tokenizer.decode(all ids, skip_special_tokens). Holds a reference to `tokenizer`'s shared data.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(Tokenizer tokenizer, bool skip_special_tokens = false)
      : tokenizer_(std::move(tokenizer)), skip_special_(skip_special_tokens) {}

  // The text completed by `id` (often empty while a character is split over tokens).
  // Fails, consuming nothing, on an id that names no token.
  StatusOr<std::string> push(TokenId id);
  std::string finish();
  size_t held_bytes() const { return stream_.held_bytes(); }

 private:
  Tokenizer tokenizer_;
  bool skip_special_;
  Utf8Stream stream_;
};

}  // namespace dsv4
