// fp16 decode/encode: every finite pattern round-trips, midpoints round to even, overflow and
// subnormal boundaries follow IEEE binary16.
#include "formats/exl3/half.h"

#include <gtest/gtest.h>

#include <cmath>

namespace dsv4::exl3 {
namespace {

TEST(Half, EveryFinitePatternRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    if (((bits >> 10) & 0x1F) == 0x1F) continue;  // inf / NaN checked below
    EXPECT_EQ(double_to_half_bits(half_bits_to_double(bits)), bits) << std::hex << b;
  }
}

TEST(Half, MidpointsTieToEven) {
  // Between consecutive finite positives a < b (patterns n, n+1) the midpoint goes to the even
  // pattern; just above / below it goes up / down. Independent of the encoder: built from decode.
  for (uint32_t n = 0; n < 0x7BFF; ++n) {
    const double a = half_bits_to_double(static_cast<uint16_t>(n));
    const double b = half_bits_to_double(static_cast<uint16_t>(n + 1));
    const double mid = (a + b) / 2;  // exact in double
    EXPECT_EQ(double_to_half_bits(mid), (n % 2 == 0) ? n : n + 1) << n;
    EXPECT_EQ(double_to_half_bits(std::nextafter(mid, 0.0)), n) << n;
    EXPECT_EQ(double_to_half_bits(std::nextafter(mid, 1e9)), n + 1) << n;
    EXPECT_EQ(double_to_half_bits(-mid), 0x8000 | ((n % 2 == 0) ? n : n + 1)) << n;
  }
}

TEST(Half, SpecialValues) {
  EXPECT_EQ(half_bits_to_double(0x3C00), 1.0);
  EXPECT_EQ(half_bits_to_double(0x0001), std::ldexp(1.0, -24));
  EXPECT_EQ(half_bits_to_double(0x7BFF), 65504.0);
  EXPECT_TRUE(std::isinf(half_bits_to_double(0x7C00)));
  EXPECT_TRUE(std::isnan(half_bits_to_double(0x7E00)));
  EXPECT_EQ(double_to_half_bits(65519.99), 0x7BFF);
  EXPECT_EQ(double_to_half_bits(65520.0), 0x7C00);  // the tie above max rounds to inf
  EXPECT_EQ(double_to_half_bits(-1e9), 0xFC00);
  EXPECT_EQ(double_to_half_bits(-0.0), 0x8000);
  EXPECT_EQ(double_to_half_bits(std::ldexp(1.0, -25)), 0x0000);        // tie to even (zero)
  EXPECT_EQ(double_to_half_bits(std::ldexp(1.5, -25)), 0x0001);
  EXPECT_EQ(double_to_half_bits(std::ldexp(1.0, -14) * (1 - 1.0 / 4096)), 0x0400);  // up to min normal
}

}  // namespace
}  // namespace dsv4::exl3
