// A hand-written matcher for the DeepSeek-V3/V4.1 pre-tokenizer: its three Isolated Split regexes
// (tokenizer-and-chat.md §1.2) without a regex engine, on Oniguruma's own Unicode tables.
#pragma once

#include <string_view>
#include <vector>

namespace dsv4 {

// The three patterns exactly as tokenizer.json spells them (after JSON unescaping).
extern const std::string_view kDeepSeekSplitPatterns[3];

// Splits `text` (valid UTF-8) into the pieces that Split(p1) -> Split(p2) -> Split(p3), all
// Isolated and not inverted, produce under Oniguruma's leftmost-first backtracking semantics.
// Each alternative of p3 is matched by a closed-form rule derived in deepseek_split.cc; the
// character classes come from Oniguruma's tables so both paths agree on every code point.
void deepseek_split(std::string_view text, std::vector<std::string_view>& pieces);

}  // namespace dsv4
