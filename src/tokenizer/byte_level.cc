// GPT-2 byte <-> char tables, built once.
#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace dsv4::byte_level {
namespace {

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 324> to_byte{};  // chars are all < 0x144
  Tables() {
    to_byte.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? static_cast<char32_t>(b) : next++;
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_to_char(uint8_t b) { return tables().to_char[b]; }

std::optional<uint8_t> char_to_byte(char32_t c) {
  if (c >= tables().to_byte.size() || tables().to_byte[c] < 0) return std::nullopt;
  return static_cast<uint8_t>(tables().to_byte[c]);
}

std::string encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char b : bytes) utf8::append(out, byte_to_char(static_cast<uint8_t>(b)));
  return out;
}

std::optional<std::string> decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8::valid_sequence_length(s, i);
    if (n == 0) return std::nullopt;
    auto b = char_to_byte(utf8::decode_at(s, i, n));
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
    i += n;
  }
  return out;
}

}  // namespace dsv4::byte_level
