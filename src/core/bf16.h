// bf16 <-> fp32: round to nearest even, NaN -> canonical 0x7FC0.
//
// 0x7FC0 is torch's c10::BFloat16 NaN (formats.md §3.5); the GPU's __float2bfloat16_rn gives 0x7FFF,
// also a NaN. Non-NaN results equal __float2bfloat16_rn for every fp32.
#pragma once

#include <cstdint>
#include <span>

#include "core/float_bits.h"

namespace dsv4 {

DSV4_HD inline uint16_t f32_to_bf16(float x) {
  const uint32_t u = f32_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;  // every NaN, either sign
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

DSV4_HD inline float bf16_to_f32(uint16_t b) { return f32_from_bits(static_cast<uint32_t>(b) << 16); }

// fp32 -> bf16 -> fp32 ("->bf16" in model-spec.md).
DSV4_HD inline float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// Element-wise over equal-length spans.
void f32_to_bf16(std::span<const float> in, std::span<uint16_t> out);
void bf16_to_f32(std::span<const uint16_t> in, std::span<float> out);
// In place: every element becomes its bf16 rounding.
void round_bf16(std::span<float> x);

}  // namespace dsv4
