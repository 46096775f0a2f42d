// FP4 e2m1 (OCP MX element) <-> fp32, and the two-codes-per-byte packing.
//
// Code = s e1 e0 m; magnitudes of codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6; 8..15 are the
// negatives (8 = -0); no inf/NaN. Encoding is RNE with ties to the even code (0.25->0, 0.75->1,
// 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4), saturating to +-6, sign kept (so -0.1 -> 8 = -0).
// Packing: byte c holds element 2c in the low nibble and 2c+1 in the high nibble (checkpoint
// experts and KV rows alike).
#pragma once

#include <cstdint>
#include <span>

#include "core/narrow_float.h"

namespace dsv4 {

inline constexpr float kE2m1Max = 6.0f;

// NaN has no e2m1 code; it maps to 7 (+6), as __nv_cvt_float_to_fp4 gives.
DSV4_HD inline uint8_t f32_to_e2m1(float x) {
  const uint32_t u = f32_bits(x);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7;
  // The magnitude's code is the number of rounding boundaries at or below it: the midpoints between
  // neighbouring magnitudes, each tie going to the even code (> where the lower code is even).
  const float m = f32_from_bits(a);
  const uint32_t c = static_cast<uint32_t>(m > 0.25f) + (m >= 0.75f) + (m > 1.25f) + (m >= 1.75f) + (m > 2.5f) +
                     (m >= 3.5f) + (m > 5.0f);
  return static_cast<uint8_t>(((u >> 28) & 0x8u) | c);
}

// Low 4 bits of code are used.
DSV4_HD inline float e2m1_to_f32(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x8u) << 28;
  return f32_from_bits(sign | f32_bits(narrow_decode_abs(code & 0x7u, 1, 1)));
}

DSV4_HD inline uint8_t pack_e2m1_pair(uint8_t even, uint8_t odd) {
  return static_cast<uint8_t>((even & 0xFu) | ((odd & 0xFu) << 4));
}
// Code of element i (0 = even/low nibble, 1 = odd/high nibble) of a packed byte.
DSV4_HD inline uint8_t e2m1_nibble(uint8_t byte, int i) {
  return static_cast<uint8_t>(i ? byte >> 4 : byte & 0xFu);
}

// codes.size() == 2 * bytes.size(); one code per byte in `codes`.
void pack_e2m1(std::span<const uint8_t> codes, std::span<uint8_t> bytes);
void unpack_e2m1(std::span<const uint8_t> bytes, std::span<uint8_t> codes);
// Encode and pack / unpack and decode; x.size() == 2 * bytes.size().
void f32_to_e2m1_packed(std::span<const float> x, std::span<uint8_t> bytes);
void e2m1_packed_to_f32(std::span<const uint8_t> bytes, std::span<float> x);

}  // namespace dsv4
