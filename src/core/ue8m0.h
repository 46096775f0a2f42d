// UE8M0 power-of-two scales (F8_E8M0) and the bit-exact ceil(log2) used to choose them.
//
// Byte b encodes 2^(b - 127) for b = 0..254 (b = 0 is 2^-127, an fp32 subnormal); 255 is NaN;
// there is no zero or infinity.
#pragma once

#include <cstdint>
#include <span>

#include "core/float_bits.h"

namespace dsv4 {

// One expression of selects, so device code decodes without branches.
DSV4_HD inline float ue8m0_to_f32(uint8_t b) {
  return f32_from_bits(b == 0xFF ? 0x7FC00000u
                       : b == 0  ? 0x00400000u  // 2^-127 (a plain b << 23 would give 0)
                                 : static_cast<uint32_t>(b) << 23);
}

// ceil(log2 v) for positive finite v, from the fp32 fields as DeepSeek's kernel computes it
// ("fast_log2_ceil"): exponent - 127 + (mantissa != 0). Exact for normal v; every fp32 subnormal
// gives -126.
DSV4_HD inline int ceil_log2_f32(float v) {
  const uint32_t u = f32_bits(v);
  return static_cast<int>((u >> 23) & 0xFFu) - 127 + ((u & 0x7FFFFFu) != 0 ? 1 : 0);
}

// 2^ceil(log2 v) as fp32 for positive v < 2^127 ("fast_pow2(fast_log2_ceil(v))"); >= v, exact.
DSV4_HD inline float pow2ceil_f32(float v) { return pow2_f32(ceil_log2_f32(v)); }

// UE8M0 byte of 2^k, clamped to the encodable range [2^-127, 2^127].
DSV4_HD inline uint8_t ue8m0_from_log2(int k) {
  const int b = k + 127;
  return static_cast<uint8_t>(b < 0 ? 0 : (b > 254 ? 254 : b));
}

// log2 of a UE8M0 scale (b != 255).
DSV4_HD inline int ue8m0_log2(uint8_t b) { return static_cast<int>(b) - 127; }

void ue8m0_to_f32(std::span<const uint8_t> in, std::span<float> out);

}  // namespace dsv4
