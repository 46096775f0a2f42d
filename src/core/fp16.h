// IEEE binary16 <-> fp32: round to nearest even with subnormals, overflow to infinity.
#pragma once

#include <cstdint>
#include <span>

#include "core/narrow_float.h"

namespace dsv4 {

// NaN -> 0x7FFF (sign dropped), as __float2half_rn gives on the GPU; |x| >= 65520 -> +-inf (0x7C00).
DSV4_HD inline uint16_t f32_to_f16(float x) {
  const uint32_t u = f32_bits(x);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7FFF;
  const uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t c = narrow_rne_code(a, 10, 15);
  if (c > 0x7C00u) c = 0x7C00u;
  return static_cast<uint16_t>(sign | c);
}

DSV4_HD inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t a = h & 0x7FFFu;
  if (a >= 0x7C00u) return f32_from_bits(sign | 0x7F800000u | ((a & 0x3FFu) << 13));  // inf/NaN
  return f32_from_bits(sign | f32_bits(narrow_decode_abs(a, 10, 15)));
}

DSV4_HD inline float round_f16(float x) { return f16_to_f32(f32_to_f16(x)); }

void f32_to_f16(std::span<const float> in, std::span<uint16_t> out);
void f16_to_f32(std::span<const uint16_t> in, std::span<float> out);

}  // namespace dsv4
