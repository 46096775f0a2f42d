// IEEE binary16 conversions against the exact-grid reference of codec_oracle_testing.h.
#include "core/fp16.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/codec_oracle_testing.h"

namespace dsv4 {
namespace {

using testing::bits_to_float;

TEST(Fp16, EncoderMatchesExactGrid) {
  testing::check_encoder(testing::f16_grid(), [](float x) { return f32_to_f16(x); });
}

TEST(Fp16, DecodesEveryPattern) {
  const testing::Grid g = testing::f16_grid();
  int bad = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float v = f16_to_f32(static_cast<uint16_t>(h));
    const uint32_t a = h & 0x7FFF;
    if (a > 0x7C00) bad += !std::isnan(v);
    else if (a == 0x7C00) bad += v != (h & 0x8000 ? -INFINITY : INFINITY);
    else bad += static_cast<double>(v) != testing::code_value(g, h) || std::signbit(v) != (h >= 0x8000);
    if (a <= 0x7C00) bad += f32_to_f16(v) != h;
  }
  EXPECT_EQ(bad, 0);
}

// IEEE 754 binary16: max 65504, overflow threshold 65520 (tie with 2^16 goes to infinity),
// smallest subnormal 2^-24 (a tie at 2^-25 goes to zero).
TEST(Fp16, EdgeValues) {
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65519.996f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);
  EXPECT_EQ(f32_to_f16(-1e10f), 0xFC00);
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001);
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);
  EXPECT_EQ(f32_to_f16(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(f32_to_f16(0x3p-25f), 0x0002);  // tie 1|2 -> 2
  EXPECT_EQ(f32_to_f16(0x1p-14f), 0x0400);  // min normal
  EXPECT_EQ(f32_to_f16(0x1.ffcp-15f), 0x0400);  // tie 0x3FF|0x400 -> 0x400 (even)
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3C00);
  EXPECT_EQ(f32_to_f16(1.0f + 0x3p-11f), 0x3C02);
  for (uint32_t u : {0x7FC00000u, 0x7F800001u, 0xFFFFFFFFu})
    EXPECT_EQ(f32_to_f16(bits_to_float(u)), 0x7FFF);  // CUDA's NaN, seen on an H200
  EXPECT_EQ(f16_to_f32(0x3555), 0x1.554p-2f);
  EXPECT_EQ(round_f16(0.1f), 0x1.998p-4f);
}

TEST(Fp16, SpanForms) {
  const std::vector<float> x = {1.0f, -2.0f, 65504.0f};
  std::vector<uint16_t> h(3);
  f32_to_f16(x, h);
  EXPECT_EQ(h, (std::vector<uint16_t>{0x3C00, 0xC000, 0x7BFF}));
  std::vector<float> y(3);
  f16_to_f32(h, y);
  EXPECT_EQ(y, x);
}

}  // namespace
}  // namespace dsv4
