// Bit access to fp32 values and the host/device marker shared by the inline number-format codecs.
#pragma once

#include <cstdint>
#include <cstring>

// Inline codecs are plain C++ usable from .cu files too (no fmt, no status.h in these headers).
#if defined(__CUDACC__)
#define DSV4_HD __host__ __device__
#else
#define DSV4_HD
#endif

namespace dsv4 {

DSV4_HD inline uint32_t f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

DSV4_HD inline float f32_from_bits(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

// 2^k as fp32 for k in [-126, 127] (normal range; exact).
DSV4_HD inline float pow2_f32(int k) { return f32_from_bits(static_cast<uint32_t>(k + 127) << 23); }

}  // namespace dsv4
