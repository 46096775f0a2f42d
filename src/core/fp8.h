// FP8 e4m3fn (satfinite, RNE) and e5m2 (RNE) <-> fp32.
//
// e4m3fn: bias 7, 3 mantissa bits, no infinities, 0x7F/0xFF are the only NaNs, max 0x7E = 448.
// The encoder matches the hardware cvt.rn.satfinite.e4m3x2.f32: everything >= 448 in magnitude
// (inf included) becomes +-448, which is also what "clamp to +-448, then convert" gives.
// e5m2: IEEE-like, bias 15, 2 mantissa bits, max 0x7B = 57344, 0x7C = inf.
#pragma once

#include <cstdint>
#include <span>

#include "core/narrow_float.h"

namespace dsv4 {

inline constexpr float kE4m3Max = 448.0f;
inline constexpr float kE5m2Max = 57344.0f;

// NaN -> 0x7F (sign dropped), as the hardware conversion gives.
DSV4_HD inline uint8_t f32_to_e4m3(float x) {
  const uint32_t u = f32_bits(x);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7F;
  uint32_t c = narrow_rne_code(a, 3, 7);
  if (c > 0x7Eu) c = 0x7Eu;  // (448, 464] rounds to 448 anyway; beyond, satfinite clamps
  return static_cast<uint8_t>(((u >> 24) & 0x80u) | c);
}

// 0x7F/0xFF -> quiet NaN with that sign.
DSV4_HD inline float e4m3_to_f32(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t a = b & 0x7Fu;
  if (a == 0x7Fu) return f32_from_bits(sign | 0x7FC00000u);
  return f32_from_bits(sign | f32_bits(narrow_decode_abs(a, 3, 7)));
}

// Non-saturating RNE (IEEE overflow): |x| >= 61440 -> +-inf (0x7C); NaN -> 0x7F (sign dropped, as
// __nv_cvt_float_to_fp8 gives).
DSV4_HD inline uint8_t f32_to_e5m2(float x) {
  const uint32_t u = f32_bits(x);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7F;
  uint32_t c = narrow_rne_code(a, 2, 15);
  if (c > 0x7Cu) c = 0x7Cu;
  return static_cast<uint8_t>(((u >> 24) & 0x80u) | c);
}

// Saturating RNE (satfinite): magnitudes past 57344, inf included, become +-57344; NaN -> 0x7F.
DSV4_HD inline uint8_t f32_to_e5m2_sat(float x) {
  const uint32_t u = f32_bits(x);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7F;
  uint32_t c = narrow_rne_code(a, 2, 15);
  if (c > 0x7Bu) c = 0x7Bu;
  return static_cast<uint8_t>(((u >> 24) & 0x80u) | c);
}

DSV4_HD inline float e5m2_to_f32(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t a = b & 0x7Fu;
  if (a >= 0x7Cu) return f32_from_bits(sign | 0x7F800000u | ((a & 3u) << 21));  // inf/NaN
  return f32_from_bits(sign | f32_bits(narrow_decode_abs(a, 2, 15)));
}

// The 256 decoded e4m3 values, indexed by byte (host table for bulk decoding).
const float* e4m3_table();

// Element-wise over equal-length spans.
void f32_to_e4m3(std::span<const float> in, std::span<uint8_t> out);
void e4m3_to_f32(std::span<const uint8_t> in, std::span<float> out);
void f32_to_e5m2(std::span<const float> in, std::span<uint8_t> out);
void e5m2_to_f32(std::span<const uint8_t> in, std::span<float> out);

}  // namespace dsv4
