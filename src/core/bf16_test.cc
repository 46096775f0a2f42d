// bf16 and its conversions against the exact-grid reference of codec_oracle_testing.h.
#include "core/bf16.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/codec_oracle_testing.h"

namespace dsv4 {
namespace {

using testing::bits_to_float;

TEST(Bf16, EncoderMatchesExactGrid) {
  testing::check_encoder(testing::bf16_grid(), [](float x) { return f32_to_bf16(x); });
}

TEST(Bf16, DecodesEveryPattern) {
  const testing::Grid g = testing::bf16_grid();
  int bad = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float v = bf16_to_f32(static_cast<uint16_t>(b));
    const uint32_t a = b & 0x7FFF;
    if (a > 0x7F80) bad += !std::isnan(v);
    else if (a == 0x7F80) bad += v != (b & 0x8000 ? -INFINITY : INFINITY);
    else bad += static_cast<double>(v) != testing::code_value(g, b) || std::signbit(v) != (b >= 0x8000);
    if (a <= 0x7F80) bad += f32_to_bf16(v) != b;
  }
  EXPECT_EQ(bad, 0);
}

// formats.md §3.5: NaN -> 0x7FC0; the low 16 bits decide RNE with ties to the even bf16.
TEST(Bf16, TiesZerosNaN) {
  EXPECT_EQ(f32_to_bf16(bits_to_float(0x3F808000u)), 0x3F80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(bits_to_float(0x3F818000u)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(bits_to_float(0x3F808001u)), 0x3F81);
  EXPECT_EQ(f32_to_bf16(bits_to_float(0x3F807FFFu)), 0x3F80);
  EXPECT_EQ(f32_to_bf16(bits_to_float(0x7F7FFFFFu)), 0x7F80);  // FLT_MAX rounds to inf
  EXPECT_EQ(f32_to_bf16(bits_to_float(0x7F7F7FFFu)), 0x7F7F);
  EXPECT_EQ(f32_to_bf16(bits_to_float(0x00008000u)), 0x0000);  // subnormal tie to even zero
  EXPECT_EQ(f32_to_bf16(bits_to_float(0x00018000u)), 0x0002);
  EXPECT_EQ(f32_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  for (uint32_t u : {0x7FC00000u, 0x7F800001u, 0xFFFFFFFFu, 0xFF800001u, 0x7FFFFFFFu})
    EXPECT_EQ(f32_to_bf16(bits_to_float(u)), 0x7FC0) << std::hex << u;
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7F80);
  EXPECT_EQ(f32_to_bf16(-INFINITY), 0xFF80);
  EXPECT_EQ(round_bf16(1.00390625f), 1.0f);  // 1 + 2^-8: tie -> 1
  EXPECT_EQ(round_bf16(1.01171875f), 1.015625f);  // 1 + 3*2^-8: tie -> 1 + 2^-6
}

TEST(Bf16, SpanForms) {
  std::vector<float> x = {1.0f, -2.5f, 1.00390625f, 3.0e38f};
  std::vector<uint16_t> b(4);
  f32_to_bf16(x, b);
  EXPECT_EQ(b, (std::vector<uint16_t>{0x3F80, 0xC020, 0x3F80, 0x7F62}));
  std::vector<float> y(4);
  bf16_to_f32(b, y);
  round_bf16(x);
  EXPECT_EQ(x, y);
  EXPECT_EQ(y[2], 1.0f);
}

}  // namespace
}  // namespace dsv4
