// Round-to-nearest-even encoding of fp32 into narrow binary float formats, and decoding back.
//
// One routine covers fp16, e5m2, e4m3fn and e2m1: a format is (mantissa bits, exponent bias), its
// unsigned codes are exponent<<man_bits | mantissa and are monotonic in value. Callers add the
// sign and decide what happens past the largest finite code (saturate or round to infinity).
#pragma once

#include <cstdint>

#include "core/float_bits.h"

namespace dsv4 {

// Unsigned code of the value nearest to |x| (ties to the even code), for abs_bits = bits(|x|) of a
// finite or infinite fp32. Unbounded above: codes past the format's largest finite one come back
// as they would in an unbounded exponent range (callers clamp); +inf gives a huge code.
DSV4_HD inline uint32_t narrow_rne_code(uint32_t abs_bits, int man_bits, int bias) {
  const int e32 = static_cast<int>(abs_bits >> 23);
  const int e32_min_normal = 127 + 1 - bias;  // fp32 biased exponent of the format's min normal
  if (e32 >= e32_min_normal) {
    // Rebias the exponent, then round away the extra mantissa bits (the carry may bump the
    // exponent, which is exactly the right neighbour).
    const int drop = 23 - man_bits;
    const uint32_t r = abs_bits - (static_cast<uint32_t>(127 - bias) << 23);
    return (r + ((1u << (drop - 1)) - 1) + ((r >> drop) & 1u)) >> drop;
  }
  // Below the min normal the format is fixed-point in units of 2^(1 - bias - man_bits):
  // |x| = mant * 2^(e - 150) with e >= 1, so the code is mant >> sh rounded to nearest even.
  const uint32_t mant = e32 ? ((abs_bits & 0x7FFFFFu) | 0x800000u) : (abs_bits & 0x7FFFFFu);
  const int e_eff = e32 ? e32 : 1;
  const int sh = (1 - bias - man_bits) - (e_eff - 150);  // >= 24 - man_bits >= 1
  if (sh >= 25) return 0;                                 // mant < 2^24 <= half a unit
  const uint32_t q = mant >> sh;
  const uint32_t rem = mant & ((1u << sh) - 1u);
  const uint32_t half = 1u << (sh - 1);
  return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
}

// fp32 value of an unsigned finite code (no sign bit, not an inf/NaN code).
DSV4_HD inline float narrow_decode_abs(uint32_t code, int man_bits, int bias) {
  const uint32_t e = code >> man_bits;
  const uint32_t m = code & ((1u << man_bits) - 1u);
  if (e == 0) {
    // Subnormal: m * 2^(1 - bias - man_bits); the scale is a normal fp32 power of two for every
    // format here, so the product is exact.
    return static_cast<float>(m) * pow2_f32(1 - bias - man_bits);
  }
  return f32_from_bits(((e + 127u - static_cast<uint32_t>(bias)) << 23) | (m << (23 - man_bits)));
}

}  // namespace dsv4
