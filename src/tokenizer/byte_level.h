// The GPT-2 byte-level alphabet: every byte 0..255 maps to one printable code point and back.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dsv4::byte_level {

// Printable bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') map to themselves; the other 68 bytes map, in
// byte order, to U+0100, U+0101, ... (so ' ' becomes 'Ġ' U+0120 and '\n' becomes 'Ċ' U+010A).
char32_t byte_to_char(uint8_t b);

// The byte whose alphabet char is `c`, or nullopt when `c` is not in the alphabet.
std::optional<uint8_t> char_to_byte(char32_t c);

// UTF-8 of the alphabet chars of `bytes` (what a vocab entry looks like in tokenizer.json).
std::string encode(std::string_view bytes);

// The bytes behind an alphabet string; nullopt when it is not valid UTF-8 or holds a char outside
// the alphabet (such strings, e.g. added tokens, stand for their own UTF-8).
std::optional<std::string> decode(std::string_view alphabet_utf8);

}  // namespace dsv4::byte_level
