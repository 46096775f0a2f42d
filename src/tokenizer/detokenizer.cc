// Utf8Stream holds back an unfinished trailing sequence; everything before it is final.
#include "tokenizer/detokenizer.h"

#include "tokenizer/utf8.h"

namespace dsv4 {

std::string Utf8Stream::push(std::string_view bytes) {
  held_.append(bytes);
  size_t stable = utf8::stable_prefix_length(held_);
  std::string out = utf8::repair(std::string_view(held_).substr(0, stable));
  held_.erase(0, stable);
  return out;
}

std::string Utf8Stream::finish() {
  std::string out = utf8::repair(held_);
  held_.clear();
  return out;
}

StatusOr<std::string> IncrementalDetokenizer::push(TokenId id) {
  auto bytes = tokenizer_.token_bytes(id);
  if (!bytes) return error(StatusCode::out_of_range, "detokenize: id {} names no token (vocab size {})", id, tokenizer_.vocab_size());
  if (skip_special_ && tokenizer_.is_special(id)) return std::string();
  return stream_.push(*bytes);
}

std::string IncrementalDetokenizer::finish() { return stream_.finish(); }

}  // namespace dsv4
