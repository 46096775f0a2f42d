// UTF-8 as the grammar writes it: well-formed sequences only (no overlong forms, no surrogates, nothing past
// U+10FFFF). Shared by the matcher (byte by byte) and the vocabulary's string-plain classes (whole tokens).
#pragma once

#include <cstdint>

namespace dsv4::structured {

// A lead byte: how many continuation bytes follow and the range of the first one (lo << 8 | hi); false for bytes
// that cannot start a multi-byte sequence (ASCII, continuations, overlong leads, beyond U+10FFFF).
inline bool utf8_lead(uint8_t byte, uint32_t& left, uint64_t& range) {
  if (byte >= 0xC2 && byte <= 0xDF) return left = 1, range = 0x80BF, true;
  if (byte == 0xE0) return left = 2, range = 0xA0BF, true;
  if (byte == 0xED) return left = 2, range = 0x809F, true;  // no UTF-16 surrogates
  if (byte >= 0xE1 && byte <= 0xEF) return left = 2, range = 0x80BF, true;
  if (byte == 0xF0) return left = 3, range = 0x90BF, true;
  if (byte >= 0xF1 && byte <= 0xF3) return left = 3, range = 0x80BF, true;
  if (byte == 0xF4) return left = 3, range = 0x808F, true;
  return false;
}

// One continuation byte against its range; the next one (if any) takes the plain range.
inline bool utf8_cont(uint8_t byte, uint32_t& left, uint64_t& range) {
  if (byte < (range >> 8) || byte > (range & 0xFF)) return false;
  --left;
  range = left > 0 ? 0x80BF : 0;
  return true;
}

}  // namespace dsv4::structured
