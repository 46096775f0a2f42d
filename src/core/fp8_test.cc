// e4m3fn / e5m2 conversions against the exact-grid reference of codec_oracle_testing.h.
#include "core/fp8.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/codec_oracle_testing.h"

namespace dsv4 {
namespace {

using testing::bits_to_float;
using testing::code_value;
using testing::check_encoder;

TEST(E4m3, EncoderMatchesExactGrid) {
  check_encoder(testing::e4m3_grid(), [](float x) { return f32_to_e4m3(x); });
}

TEST(E5m2, EncoderMatchesExactGrid) {
  check_encoder(testing::e5m2_grid(false), [](float x) { return f32_to_e5m2(x); });
  testing::Grid sat = testing::e5m2_grid(true);
  check_encoder(sat, [](float x) { return f32_to_e5m2_sat(x); });
}

// formats.md §3.5: hardware satfinite gives 0x7E for (464, 480) and >= 480 (c10 gives NaN there);
// 464 itself is the tie between 448 (even code 0x7E) and 480, so 448.
TEST(E4m3, SaturatesEveryValueFrom448Up) {
  int bad = 0;
  for (uint32_t u = 0x43E00000u; u <= 0x7F800000u; u += (u < 0x44000000u ? 1u : 4099u)) {
    const float x = bits_to_float(u);
    bad += f32_to_e4m3(x) != 0x7E;
    bad += f32_to_e4m3(-x) != 0xFE;
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(f32_to_e4m3(464.0f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(479.99997f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(480.0f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(-INFINITY), 0xFE);
  EXPECT_EQ(f32_to_e4m3(432.0f), 0x7E);  // tie 416|448 -> even mantissa 6 (448)
  EXPECT_EQ(f32_to_e4m3(std::nextafter(432.0f, 0.0f)), 0x7D);
}

TEST(E4m3, SpecValuesAndTies) {
  EXPECT_EQ(f32_to_e4m3(1.0f), 0x38);
  EXPECT_EQ(f32_to_e4m3(0.001953125f), 0x01);   // 2^-9
  EXPECT_EQ(f32_to_e4m3(0.013671875f), 0x07);   // 7 * 2^-9
  EXPECT_EQ(f32_to_e4m3(0.015625f), 0x08);      // 2^-6, min normal
  EXPECT_EQ(f32_to_e4m3(0.0009765625f), 0x00);  // 2^-10: tie 0|2^-9 -> 0
  EXPECT_EQ(f32_to_e4m3(0.0029296875f), 0x02);  // 1.5 * 2^-9: tie 1|2 -> 2
  EXPECT_EQ(f32_to_e4m3(1.0625f), 0x38);        // tie 1|1.125 -> 1
  EXPECT_EQ(f32_to_e4m3(1.1875f), 0x3A);        // tie 1.125|1.25 -> 1.25
  EXPECT_EQ(f32_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_e4m3(-1e-30f), 0x80);
  // Above the 0.6875|0.75 midpoint 0.71875 (formats.md §3.5 mentions a double-rounding claim here).
  EXPECT_EQ(f32_to_e4m3(0.7265625f), 0x34);  // 0.75
  EXPECT_EQ(f32_to_e4m3(0.71875f), 0x34);  // tie 0x33|0x34 -> even mantissa (0.75)
}

TEST(Fp8, NaNInputs) {
  for (uint32_t u : {0x7FC00000u, 0x7F800001u, 0xFFFFFFFFu, 0xFF800001u, 0x7FBFFFFFu}) {
    EXPECT_EQ(f32_to_e4m3(bits_to_float(u)), 0x7F);
    EXPECT_EQ(f32_to_e5m2(bits_to_float(u)), 0x7F);  // CUDA's NaN codes, seen on an H200
    EXPECT_EQ(f32_to_e5m2_sat(bits_to_float(u)), 0x7F);
  }
  EXPECT_EQ(f32_to_e5m2(INFINITY), 0x7C);
  EXPECT_EQ(f32_to_e5m2(-INFINITY), 0xFC);
  EXPECT_EQ(f32_to_e5m2(61439.996f), 0x7B);
  EXPECT_EQ(f32_to_e5m2(61440.0f), 0x7C);
  EXPECT_EQ(f32_to_e5m2_sat(1e30f), 0x7B);
}

TEST(E4m3, DecodesEveryByte) {
  const testing::Grid g = testing::e4m3_grid();
  for (int b = 0; b < 256; ++b) {
    const float v = e4m3_to_f32(static_cast<uint8_t>(b));
    if ((b & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << b;
      continue;
    }
    EXPECT_EQ(static_cast<double>(v), code_value(g, b)) << b;
    EXPECT_EQ(std::signbit(v), b >= 0x80) << b;
    EXPECT_EQ(e4m3_table()[b], v) << b;
    EXPECT_EQ(f32_to_e4m3(v), b) << b;  // every finite code round-trips
  }
  EXPECT_EQ(e4m3_to_f32(0x01), 0.001953125f);
  EXPECT_EQ(e4m3_to_f32(0x07), 0.013671875f);
  EXPECT_EQ(e4m3_to_f32(0x08), 0.015625f);
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0xFE), -448.0f);
}

TEST(E5m2, DecodesEveryByte) {
  const testing::Grid g = testing::e5m2_grid(false);
  for (int b = 0; b < 256; ++b) {
    const float v = e5m2_to_f32(static_cast<uint8_t>(b));
    const int a = b & 0x7F;
    if (a == 0x7C) {
      EXPECT_EQ(v, b >= 0x80 ? -INFINITY : INFINITY);
    } else if (a > 0x7C) {
      EXPECT_TRUE(std::isnan(v)) << b;
    } else {
      EXPECT_EQ(static_cast<double>(v), code_value(g, b)) << b;
      EXPECT_EQ(std::signbit(v), b >= 0x80) << b;
      EXPECT_EQ(f32_to_e5m2(v), b) << b;
    }
  }
  EXPECT_EQ(e5m2_to_f32(0x7B), 57344.0f);
  EXPECT_EQ(e5m2_to_f32(0x01), 0x1p-16f);
  EXPECT_EQ(e5m2_to_f32(0x3C), 1.0f);
}

TEST(Fp8, SpanForms) {
  const std::vector<float> x = {1.0f, -448.0f, 0.001953125f, 1000.0f};
  std::vector<uint8_t> c(4);
  f32_to_e4m3(x, c);
  EXPECT_EQ(c, (std::vector<uint8_t>{0x38, 0xFE, 0x01, 0x7E}));
  std::vector<float> y(4);
  e4m3_to_f32(c, y);
  EXPECT_EQ(y, (std::vector<float>{1.0f, -448.0f, 0.001953125f, 448.0f}));
  f32_to_e5m2(x, c);
  EXPECT_EQ(c, (std::vector<uint8_t>{0x3C, 0xDF, 0x18, 0x64}));
  e5m2_to_f32(c, y);
  EXPECT_EQ(y, (std::vector<float>{1.0f, -448.0f, 0.001953125f, 1024.0f}));
}

}  // namespace
}  // namespace dsv4
