// e2m1 conversion and packing against the exact-grid reference and formats.md §3.3's tie table.
#include "core/fp4.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/codec_oracle_testing.h"

namespace dsv4 {
namespace {

using testing::bits_to_float;

TEST(E2m1, EncoderMatchesExactGrid) {
  testing::check_encoder(testing::e2m1_grid(), [](float x) { return f32_to_e2m1(x); });
}

// formats.md §3.3: |x| <= 0.25 -> 0, (0.25, 0.75) -> 0.5, [0.75, 1.25] -> 1, (1.25, 1.75) -> 1.5,
// [1.75, 2.5] -> 2, (2.5, 3.5) -> 3, [3.5, 5] -> 4, > 5 -> 6.
TEST(E2m1, SpecTieTable) {
  struct Case {
    float x;
    uint8_t code;
  };
  const Case cases[] = {
      {0.25f, 0}, {0.75f, 2}, {1.25f, 2}, {1.75f, 4}, {2.5f, 4}, {3.5f, 6}, {5.0f, 6},
      {0.2500001f, 1}, {0.7499999f, 1}, {1.2500001f, 3}, {1.7499999f, 3}, {2.5000002f, 5},
      {3.4999998f, 5}, {5.0000005f, 7}, {6.0f, 7}, {7.0f, 7}, {1e30f, 7}, {INFINITY, 7},
      {0.0f, 0}, {0.5f, 1}, {1.0f, 2}, {1.5f, 3}, {2.0f, 4}, {3.0f, 5}, {4.0f, 6},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(f32_to_e2m1(c.x), c.code) << c.x;
    EXPECT_EQ(f32_to_e2m1(-c.x), c.code | 8) << -c.x;  // sign kept, -0 included
  }
  EXPECT_EQ(f32_to_e2m1(-0.0f), 8);
  EXPECT_EQ(f32_to_e2m1(-0.1f), 8);
  EXPECT_EQ(f32_to_e2m1(bits_to_float(0x7FC00000u)), 7);  // CUDA gives 7 too (H200)
}

TEST(E2m1, DecodesEveryCode) {
  const float want[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int c = 0; c < 16; ++c) {
    const float v = e2m1_to_f32(static_cast<uint8_t>(c));
    EXPECT_EQ(v, want[c]) << c;
    EXPECT_EQ(std::signbit(v), c >= 8) << c;
    EXPECT_EQ(f32_to_e2m1(v), c);
    EXPECT_EQ(e2m1_to_f32(static_cast<uint8_t>(c | 0xF0)), want[c]);  // high bits ignored
  }
}

// formats.md §2.4: byte c holds element 2c in the low nibble.
TEST(E2m1, PackingEvenElementLowNibble) {
  EXPECT_EQ(pack_e2m1_pair(0x1, 0x2), 0x21);
  EXPECT_EQ(e2m1_nibble(0x21, 0), 0x1);
  EXPECT_EQ(e2m1_nibble(0x21, 1), 0x2);
  const std::vector<float> x = {0.5f, -6.0f, 1.0f, 0.0f, -0.0f, 3.0f};
  std::vector<uint8_t> bytes(3);
  f32_to_e2m1_packed(x, bytes);
  EXPECT_EQ(bytes, (std::vector<uint8_t>{0xF1, 0x02, 0x58}));
  std::vector<float> y(6);
  e2m1_packed_to_f32(bytes, y);
  EXPECT_EQ(y, x);
  EXPECT_TRUE(std::signbit(y[4]));
  std::vector<uint8_t> codes(6);
  unpack_e2m1(bytes, codes);
  EXPECT_EQ(codes, (std::vector<uint8_t>{1, 15, 2, 0, 8, 5}));
  std::vector<uint8_t> again(3);
  pack_e2m1(codes, again);
  EXPECT_EQ(again, bytes);
}

}  // namespace
}  // namespace dsv4
