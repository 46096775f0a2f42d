// UTF-8 helpers for the tokenizer: code-point decoding, validity, lossy repair, complete prefixes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dsv4::utf8 {

inline constexpr char32_t kReplacement = 0xFFFD;

// Length of the well-formed sequence at s[pos] (1..4), or 0 when s[pos] starts an ill-formed one.
// Well-formed follows Unicode Table 3-7 (no overlongs, no surrogates, <= U+10FFFF).
size_t valid_multibyte_length(std::string_view s, size_t pos);  // for s[pos] >= 0x80
inline size_t valid_sequence_length(std::string_view s, size_t pos) {
  return static_cast<uint8_t>(s[pos]) < 0x80 ? 1 : valid_multibyte_length(s, pos);
}

// Length of the maximal subpart of an ill-formed sequence at s[pos] (>= 1): the bytes that one
// U+FFFD replaces under the W3C/WHATWG "maximal subpart" rule, which Rust's from_utf8_lossy and
// JS TextDecoder both follow.
size_t maximal_subpart_length(std::string_view s, size_t pos);

bool is_valid(std::string_view s);

// `s` with every maximal ill-formed subpart replaced by U+FFFD; valid input is returned unchanged.
std::string repair(std::string_view s);

// Decodes the well-formed code point at s[pos] of length `len` (from valid_sequence_length).
char32_t decode_at(std::string_view s, size_t pos, size_t len);

void append(std::string& out, char32_t cp);

// Length of the longest prefix of `s` that lossy decoding can emit now without knowing later bytes:
// everything except a trailing sequence that is a proper prefix of some well-formed sequence.
size_t stable_prefix_length(std::string_view s);

}  // namespace dsv4::utf8
