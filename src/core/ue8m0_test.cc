// UE8M0 decoding and the bit-exact ceil(log2) against exact powers of two.
#include "core/ue8m0.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/codec_oracle_testing.h"

namespace dsv4 {
namespace {

using testing::bits_to_float;

// formats.md §3.4: 2^(b - 127) for b = 0..254 (b = 0 is the fp32 subnormal 0x00400000), 255 NaN.
TEST(Ue8m0, DecodesEveryByte) {
  for (int b = 0; b < 255; ++b)
    EXPECT_EQ(static_cast<double>(ue8m0_to_f32(static_cast<uint8_t>(b))), std::ldexp(1.0, b - 127)) << b;
  EXPECT_TRUE(std::isnan(ue8m0_to_f32(255)));
  EXPECT_EQ(testing::float_to_bits(ue8m0_to_f32(0)), 0x00400000u);
  EXPECT_EQ(ue8m0_to_f32(127), 1.0f);
  EXPECT_EQ(ue8m0_to_f32(105), 0x1p-22f);
  EXPECT_EQ(ue8m0_to_f32(254), 0x1p127f);
  std::vector<uint8_t> in = {0, 1, 127, 255};
  std::vector<float> out(4);
  ue8m0_to_f32(in, out);
  EXPECT_EQ(out[2], 1.0f);
  EXPECT_EQ(out[1], 0x1p-126f);
  EXPECT_TRUE(std::isnan(out[3]));
}

// Reference: the smallest integer k with 2^k >= v, by exact double comparison.
int ceil_log2_exact(double v) {
  int k = -200;
  while (std::ldexp(1.0, k) < v) ++k;
  return k;
}

TEST(Ue8m0, CeilLog2OfEveryExponentBoundary) {
  std::vector<uint32_t> in;
  for (uint32_t e = 1; e < 255; ++e)
    for (uint32_t m : {0u, 1u, 2u, 0x400000u, 0x7FFFFEu, 0x7FFFFFu}) in.push_back((e << 23) | m);
  std::mt19937 rng(7);
  for (int i = 0; i < 100000; ++i) in.push_back(rng() % 0x7F000000u + 0x00800000u);  // normal
  int bad = 0;
  for (uint32_t u : in) {
    const float v = bits_to_float(u);
    const int want = ceil_log2_exact(v);
    bad += ceil_log2_f32(v) != want;
    if (want <= 127) bad += static_cast<double>(pow2ceil_f32(v)) != std::ldexp(1.0, want);
  }
  EXPECT_EQ(bad, 0);
  // formats.md §3.6: every fp32 subnormal gives -126 (the kernel's bit trick).
  for (uint32_t u : {1u, 2u, 0x400000u, 0x7FFFFFu}) EXPECT_EQ(ceil_log2_f32(bits_to_float(u)), -126);
  EXPECT_EQ(ceil_log2_f32(1.0f), 0);
  EXPECT_EQ(ceil_log2_f32(1.0000001f), 1);
  EXPECT_EQ(ceil_log2_f32(0.75f), 0);
}

TEST(Ue8m0, BytesFromLog2) {
  EXPECT_EQ(ue8m0_from_log2(0), 127);
  EXPECT_EQ(ue8m0_from_log2(-22), 105);
  EXPECT_EQ(ue8m0_from_log2(-126), 1);
  EXPECT_EQ(ue8m0_from_log2(-127), 0);
  EXPECT_EQ(ue8m0_from_log2(-300), 0);
  EXPECT_EQ(ue8m0_from_log2(127), 254);
  EXPECT_EQ(ue8m0_from_log2(128), 254);
  EXPECT_EQ(ue8m0_log2(119), -8);
}

}  // namespace
}  // namespace dsv4
