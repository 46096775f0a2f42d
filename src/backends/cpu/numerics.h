// Scalar number formats as the oracle uses them: core's bf16 / e4m3 / e2m1 / ue8m0 codecs and
// quantizer scale rules (model-spec.md §3.1, §4.3), plus a one-rounding double -> bf16 for ref64.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/bf16.h"
#include "core/fp4.h"
#include "core/fp8.h"
#include "core/quant.h"
#include "core/ue8m0.h"

namespace dsv4::cpu {

using bf16_t = uint16_t;  // raw bfloat16 bits

using dsv4::bf16_to_f32;
using dsv4::e2m1_to_f32;
using dsv4::e4m3_to_f32;
using dsv4::f32_to_bf16;
using dsv4::f32_to_e2m1;
using dsv4::f32_to_e4m3;
using dsv4::ue8m0_to_f32;

// Round-to-nearest-even double -> bf16 in one rounding: a double that rounds to a float lying
// exactly on a bf16 tie is nudged one float ulp towards its true side first.
inline bf16_t f64_to_bf16(double d) {
  float f = static_cast<float>(d);
  if ((f32_bits(f) & 0xffffu) == 0x8000u && static_cast<double>(f) != d && std::isfinite(f))
    f = std::nextafter(f, d > static_cast<double>(f) ? std::numeric_limits<float>::infinity()
                                                     : -std::numeric_limits<float>::infinity());
  return f32_to_bf16(f);
}

inline bf16_t to_bf16(float f) { return f32_to_bf16(f); }
inline bf16_t to_bf16(double d) { return f64_to_bf16(d); }
// The value of x after rounding to bf16 ("->bf16"), in x's own type.
template <typename T> inline T round_bf16(T x) { return static_cast<T>(bf16_to_f32(to_bf16(x))); }

inline float group_amax(const float* x, int n) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  return amax;
}

// Rule (a), act_quant: e4m3 codes with one UE8M0 scale per group; returns the scale byte.
inline uint8_t quant_fp8_group(const float* x, int n, uint8_t* codes) {
  const uint8_t sbyte = fp8_ue8m0_scale(group_amax(x, n));
  const float inv_s = 1.0f / ue8m0_to_f32(sbyte);
  for (int i = 0; i < n; ++i) codes[i] = fp8_ue8m0_code(x[i], inv_s);
  return sbyte;
}

// Rule (b): e2m1 codes with one UE8M0 scale per group (index keys, indexer queries).
inline uint8_t quant_fp4_ue8m0_group(const float* x, int n, uint8_t* codes) {
  const uint8_t sbyte = fp4_ue8m0_scale(group_amax(x, n));
  const float inv_s = 1.0f / ue8m0_to_f32(sbyte);
  for (int i = 0; i < n; ++i) codes[i] = fp4_ue8m0_code(x[i], inv_s);
  return sbyte;
}

// Rule (c): e2m1 codes with one e4m3 scale per group (compressed main KV); returns the e4m3 code.
inline uint8_t quant_fp4_e4m3_group(const float* x, int n, uint8_t* codes) {
  const uint8_t scode = fp4_e4m3_scale(group_amax(x, n));
  const float s = e4m3_to_f32(scode);
  for (int i = 0; i < n; ++i) codes[i] = fp4_e4m3_code(x[i], s);
  return scode;
}

}  // namespace dsv4::cpu
