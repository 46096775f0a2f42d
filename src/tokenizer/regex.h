// A compiled Oniguruma pattern (UTF-8, Ruby syntax: what Hugging Face `tokenizers` uses).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace dsv4 {

// Initializes Oniguruma for UTF-8 once per process (compile() does this itself).
void ensure_oniguruma();

struct Span {
  uint32_t begin = 0, end = 0;  // byte offsets, [begin, end)
};

class Regex {
 public:
  // Fails with the Oniguruma message when the pattern does not compile.
  static StatusOr<Regex> compile(std::string_view pattern);

  // Appends the successive leftmost matches in `text` (valid UTF-8). The regex sees only `text`:
  // lookahead stops at its end. An empty match right after the previous one is skipped by one
  // char, as Rust's onig `find_iter` does.
  void find_all(std::string_view text, std::vector<Span>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Compiled;
  std::shared_ptr<const Compiled> compiled_;  // immutable after compile; shared by copies/threads
  std::string pattern_;
};

}  // namespace dsv4
