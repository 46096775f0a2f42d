// Scalar number formats of the oracle: bf16 rounding, e4m3 / e2m1 / ue8m0 codes and the four
// quantize-dequantize rules of model-spec.md §3.1 and §4.3, written for clarity.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace dsv4::cpu {

using bf16_t = uint16_t;  // raw bfloat16 bits

inline float f32_from_bits(uint32_t b) { float f; std::memcpy(&f, &b, 4); return f; }
inline uint32_t bits_from_f32(float f) { uint32_t b; std::memcpy(&b, &f, 4); return b; }

inline float bf16_to_f32(bf16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

// Round-to-nearest-even float -> bf16 (NaN stays a quiet NaN).
inline bf16_t f32_to_bf16(float f) {
  uint32_t b = bits_from_f32(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_t>((b >> 16) | 0x40);
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<bf16_t>(b >> 16);
}

// Round-to-nearest-even double -> bf16 in one rounding: a double that rounds to a float lying
// exactly on a bf16 tie is nudged one float ulp towards its true side first.
inline bf16_t f64_to_bf16(double d) {
  float f = static_cast<float>(d);
  if ((bits_from_f32(f) & 0xffffu) == 0x8000u && static_cast<double>(f) != d && std::isfinite(f))
    f = std::nextafter(f, d > static_cast<double>(f) ? std::numeric_limits<float>::infinity()
                                                     : -std::numeric_limits<float>::infinity());
  return f32_to_bf16(f);
}

inline bf16_t to_bf16(float f) { return f32_to_bf16(f); }
inline bf16_t to_bf16(double d) { return f64_to_bf16(d); }
// The value of x after rounding to bf16, in x's own type.
template <typename T> inline T round_bf16(T x) { return static_cast<T>(bf16_to_f32(to_bf16(x))); }

// ---- e4m3fn (bias 7, max 448, no infinities) ----
inline float e4m3_to_f32(uint8_t c) {
  const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  float v;
  if (e == 15 && m == 7) v = std::numeric_limits<float>::quiet_NaN();
  else if (e == 0) v = std::ldexp(static_cast<float>(m), -9);
  else v = std::ldexp(static_cast<float>(8 + m), e - 10);
  return s ? -v : v;
}

// Round-to-nearest-even to e4m3fn, saturating to +-448 (CUDA satfinite).
inline uint8_t f32_to_e4m3(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  float a = std::fabs(x);
  if (std::isnan(x)) return 0x7f;
  if (a >= 448.0f) return sign | 0x7e;
  // Values below 2^-6 are subnormal with spacing 2^-9; above, spacing 2^(e-3).
  int e;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  int exp_unbiased = e - 1;
  if (exp_unbiased < -6) exp_unbiased = -6;
  const float quantum = std::ldexp(1.0f, exp_unbiased - 3);
  float q = std::nearbyint(a / quantum);  // default rounding mode: nearest-even
  float v = q * quantum;
  if (v >= 448.0f) return sign | 0x7e;
  if (v == 0.0f) return sign;
  int ve;
  std::frexp(v, &ve);
  int be = ve - 1 + 7;
  if (be <= 0) return sign | static_cast<uint8_t>(static_cast<int>(v / std::ldexp(1.0f, -9)));
  const int m = static_cast<int>(v / std::ldexp(1.0f, ve - 1 - 3)) - 8;
  return sign | static_cast<uint8_t>((be << 3) | m);
}

// ---- e2m1 (codes 0..7 = 0, .5, 1, 1.5, 2, 3, 4, 6; bit 3 = sign) ----
inline float e2m1_to_f32(uint8_t c) {
  static constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = kValues[c & 7];
  return (c & 8) ? -v : v;
}

// Nearest e2m1 code, ties to the even code (0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4,
// 5->4); the input is already clamped to [-6, 6]; the sign is kept (also for -0).
inline uint8_t f32_to_e2m1(float x) {
  const uint8_t sign = std::signbit(x) ? 8 : 0;
  const float a = std::fabs(x);
  uint8_t c;
  if (a <= 0.25f) c = 0;
  else if (a < 0.75f) c = 1;
  else if (a <= 1.25f) c = 2;
  else if (a < 1.75f) c = 3;
  else if (a <= 2.5f) c = 4;
  else if (a < 3.5f) c = 5;
  else if (a <= 5.0f) c = 6;
  else c = 7;
  return sign | c;
}

// ---- ue8m0 power-of-two scales ----
inline float ue8m0_to_f32(uint8_t b) { return std::ldexp(1.0f, static_cast<int>(b) - 127); }

// 2^(E(t) - 127 + (M(t) != 0)) on the fp32 bits of t > 0: the power of two at or above t.
inline uint8_t pow2ceil_ue8m0(float t) {
  const uint32_t b = bits_from_f32(t);
  const int e = static_cast<int>((b >> 23) & 0xff);
  const uint32_t m = b & 0x7fffffu;
  return static_cast<uint8_t>(e + (m != 0 ? 1 : 0));
}

// ---- quantize-dequantize rules (model-spec.md §4.3); inputs are bf16 values ----

// (a) act_quant: FP8 e4m3 with a pow2 (UE8M0) scale per group. Writes the e4m3 codes and returns
// the scale byte. Used for activations entering FP8/FP4 linears and for window keys.
inline uint8_t quant_fp8_group(const float* x, int n, uint8_t* codes) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  amax = std::fmax(amax, 1e-4f);
  const uint8_t sbyte = pow2ceil_ue8m0(amax * (1.0f / 448.0f));
  const float s = ue8m0_to_f32(sbyte);
  for (int i = 0; i < n; ++i) {
    float v = x[i] / s;
    v = std::fmin(std::fmax(v, -448.0f), 448.0f);
    codes[i] = f32_to_e4m3(v);
  }
  return sbyte;
}

// (b) FP4 e2m1 with a pow2 (UE8M0) scale per 32: index keys and indexer queries.
inline uint8_t quant_fp4_ue8m0_group(const float* x, int n, uint8_t* codes) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  amax = std::fmax(amax, 6.0f * std::ldexp(1.0f, -126));
  const uint8_t sbyte = pow2ceil_ue8m0(amax * (1.0f / 6.0f));
  const float s = ue8m0_to_f32(sbyte);
  for (int i = 0; i < n; ++i) {
    float v = x[i] / s;
    v = std::fmin(std::fmax(v, -6.0f), 6.0f);
    codes[i] = f32_to_e2m1(v);
  }
  return sbyte;
}

// (c) FP4 e2m1 with an e4m3 scale per 16: the compressed main KV. Returns the e4m3 scale code.
inline uint8_t quant_fp4_e4m3_group(const float* x, int n, uint8_t* codes) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  amax = std::fmax(amax, 6.0f * std::ldexp(1.0f, -9));
  const uint8_t scode = f32_to_e4m3(amax / 6.0f);
  const float s = e4m3_to_f32(scode);
  for (int i = 0; i < n; ++i) {
    float v = x[i] / s;
    v = std::fmin(std::fmax(v, -6.0f), 6.0f);
    codes[i] = f32_to_e2m1(v);
  }
  return scode;
}

}  // namespace dsv4::cpu
