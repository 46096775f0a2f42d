// IEEE binary16 decode and round-to-nearest-even encode from double.
#include "formats/exl3/half.h"

#include <cmath>

#include "core/fp16.h"

namespace dsv4::exl3 {

// Every fp16 value (inf and NaN too) is exact in fp32, so core's decode serves.
double half_bits_to_double(uint16_t bits) { return static_cast<double>(f16_to_f32(bits)); }

uint16_t double_to_half_bits(double value) {
  const uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  if (std::isnan(value)) return sign | 0x7E00;
  double a = std::fabs(value);
  if (a == 0.0) return sign;
  // Quantum of the target binade: 2^-24 for subnormals, 2^(e-10) for normals with 2^e <= a.
  int e = std::ilogb(a);
  if (e < -14) e = -14;
  const double quantum = std::ldexp(1.0, e - 10);
  double q = a / quantum;                       // exact: division by a power of two
  double r = std::nearbyint(q);                 // default rounding mode: ties to even
  double rounded = r * quantum;
  if (rounded >= 65520.0 || rounded > 65504.0) return sign | 0x7C00;  // overflow -> inf
  // Re-encode the (now representable) value.
  if (rounded < std::ldexp(1.0, -14)) {
    return sign | static_cast<uint16_t>(std::ldexp(rounded, 24));
  }
  int re = std::ilogb(rounded);
  const int mant = static_cast<int>(std::ldexp(rounded, 10 - re)) - 1024;
  return sign | static_cast<uint16_t>(((re + 15) << 10) | mant);
}

}  // namespace dsv4::exl3
