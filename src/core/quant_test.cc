// Block quantizers against an independent exact computation of each rule.
//
// The reference below follows formats.md §3.6 / model-spec.md §4.3 with exact arithmetic: amax by
// double comparison; the fp32 product amax * fl32(1/448) formed exactly in double (24x24 bits) and
// rounded once to fp32; the scale exponent as the smallest k with 2^k >= t; element rounding by the
// exact-grid nearest search of codec_oracle_testing.h. Rule (c)'s IEEE fp32 division is formed in
// double and rounded once to fp32 (correctly rounded, as 53 >= 2*24 + 2).
#include "core/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/bf16.h"
#include "core/codec_oracle_testing.h"

namespace dsv4 {
namespace {

using testing::bits_to_float;
using testing::code_value;
using testing::nearest_code;

const testing::Grid& e4m3() {
  static const testing::Grid g = testing::e4m3_grid();
  return g;
}
const testing::Grid& e2m1() {
  static const testing::Grid g = testing::e2m1_grid();
  return g;
}

// Constants as formats.md §3.6 gives their bits.
const float kRefInv448 = bits_to_float(0x3B124925u);
const float kRefInv6 = bits_to_float(0x3E2AAAABu);
const float kRef1em4 = bits_to_float(0x38D1B717u);

double amax_of(const float* x, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(static_cast<double>(x[i])));
  return m;
}

int smallest_pow2_at_least(double t) {
  int k = -200;
  while (std::ldexp(1.0, k) < t) ++k;
  return k;
}

struct RefBlock {
  std::vector<uint32_t> codes;
  uint32_t scale;                // UE8M0 byte or e4m3 code
  std::vector<double> deq;
};

// Rules (a) and (b): power-of-two scale from fl32(max(amax, floor) * inv).
RefBlock ref_pow2(const float* x, size_t n, double floor, float inv, double max_elem,
                  const testing::Grid& g) {
  double a = std::max(amax_of(x, n), floor);
  const float t = static_cast<float>(a * static_cast<double>(inv));  // exact product, one rounding
  int k = smallest_pow2_at_least(t);
  if (k < -126) k = -126;  // the kernel's bit trick on a subnormal t (formats.md §3.6)
  RefBlock r{{}, static_cast<uint32_t>(k + 127), {}};
  for (size_t i = 0; i < n; ++i) {
    double y = std::ldexp(static_cast<double>(x[i]), -k);  // exact
    y = std::max(-max_elem, std::min(max_elem, y));
    const uint32_t c = nearest_code(g, y);
    r.codes.push_back(c);
    r.deq.push_back(std::ldexp(code_value(g, c), k));
  }
  return r;
}

// Rule (c): e4m3 scale of fl32(max(amax, 6*2^-9) / 6).
RefBlock ref_e4m3_scale(const float* x, size_t n) {
  const double a = std::max(amax_of(x, n), 6.0 * std::ldexp(1.0, -9));
  const float t = static_cast<float>(a / 6.0);
  const uint32_t sc = nearest_code(e4m3(), t);
  const double s = code_value(e4m3(), sc);
  RefBlock r{{}, sc, {}};
  for (size_t i = 0; i < n; ++i) {
    double y = static_cast<float>(static_cast<double>(x[i]) / s);
    y = std::max(-6.0, std::min(6.0, y));
    const uint32_t c = nearest_code(e2m1(), y);
    r.codes.push_back(c);
    r.deq.push_back(code_value(e2m1(), c) * s);
  }
  return r;
}

// Random bf16-representable blocks: magnitudes over a wide exponent range, some exact zeros,
// some bf16 subnormals, some ties on the scaled grid, both signs.
std::vector<float> random_values(std::mt19937& rng, size_t n, int mode) {
  std::vector<float> x(n);
  std::uniform_int_distribution<int> exp_range(-30, 30), mant(0, 127), coin(0, 1);
  const int base = mode == 3 ? -130 : exp_range(rng);
  for (size_t i = 0; i < n; ++i) {
    float v;
    if (mode == 1 && rng() % 4 == 0) v = 0.0f;
    else if (mode == 2) v = bits_to_float((rng() % 128) << 16);  // bf16 subnormal
    else v = std::ldexp(1.0f + mant(rng) / 128.0f, base - static_cast<int>(rng() % 12));
    x[i] = round_bf16(coin(rng) ? -v : v);
  }
  return x;
}

template <class Quant, class Ref>
void check_rule(int block, bool packed, Quant quant, Ref ref, uint64_t seed) {
  std::mt19937 rng(seed);
  int bad = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const size_t n = static_cast<size_t>(block) * (1 + rng() % 4);
    std::vector<float> x = random_values(rng, n, trial % 4);
    std::vector<uint8_t> codes(packed ? n / 2 : n), scales(n / block);
    std::vector<float> deq(n);
    quant(x, codes, scales, deq);
    for (size_t b = 0; b < n / block; ++b) {
      const RefBlock r = ref(x.data() + b * block, static_cast<size_t>(block));
      bad += scales[b] != r.scale;
      for (int j = 0; j < block; ++j) {
        const size_t i = b * block + j;
        const uint32_t c = packed ? e2m1_nibble(codes[i / 2], i & 1) : codes[i];
        bad += c != r.codes[j];
        bad += static_cast<double>(deq[i]) != r.deq[j];
        bad += std::signbit(deq[i]) != std::signbit(r.deq[j]);
      }
    }
    if (bad && trial < 5) ADD_FAILURE() << "mismatch in trial " << trial;
  }
  EXPECT_EQ(bad, 0);
}

TEST(Quant, ConstantsHaveSpecBits) {
  EXPECT_EQ(testing::float_to_bits(kInv448), 0x3B124925u);
  EXPECT_EQ(testing::float_to_bits(kInv6), 0x3E2AAAABu);
  EXPECT_EQ(testing::float_to_bits(kFp8AmaxFloor), 0x38D1B717u);
  EXPECT_EQ(static_cast<double>(kFp4Ue8m0AmaxFloor), 6.0 * std::ldexp(1.0, -126));
  EXPECT_EQ(static_cast<double>(kFp4E4m3AmaxFloor), 6.0 * std::ldexp(1.0, -9));
}

TEST(Quant, Fp8Ue8m0MatchesExactRule) {
  for (int block : {32, 64, 128}) {
    check_rule(
        block, false,
        [&](const std::vector<float>& x, std::vector<uint8_t>& c, std::vector<uint8_t>& s,
            std::vector<float>& d) {
          quant_fp8_ue8m0(x, block, c, s);
          std::vector<float> d2(x.size());
          dequant_fp8_ue8m0(c, s, block, d2);
          qdq_fp8_ue8m0(x, block, d);
          EXPECT_EQ(d, d2);
        },
        [](const float* x, size_t n) { return ref_pow2(x, n, kRef1em4, kRefInv448, 448, e4m3()); },
        block);
  }
}

TEST(Quant, Fp4Ue8m0MatchesExactRule) {
  check_rule(
      32, true,
      [](const std::vector<float>& x, std::vector<uint8_t>& c, std::vector<uint8_t>& s,
         std::vector<float>& d) {
        quant_fp4_ue8m0(x, 32, c, s);
        std::vector<float> d2(x.size());
        dequant_fp4_ue8m0(c, s, 32, d2);
        qdq_fp4_ue8m0(x, 32, d);
        EXPECT_EQ(d, d2);
      },
      [](const float* x, size_t n) {
        return ref_pow2(x, n, 6.0 * std::ldexp(1.0, -126), kRefInv6, 6, e2m1());
      },
      11);
}

TEST(Quant, Fp4E4m3MatchesExactRule) {
  check_rule(
      16, true,
      [](const std::vector<float>& x, std::vector<uint8_t>& c, std::vector<uint8_t>& s,
         std::vector<float>& d) {
        quant_fp4_e4m3(x, 16, c, s);
        std::vector<float> d2(x.size());
        dequant_fp4_e4m3(c, s, 16, d2);
        qdq_fp4_e4m3(x, 16, d);
        EXPECT_EQ(d, d2);
      },
      ref_e4m3_scale, 12);
}

// formats.md §3.6 worked values.
TEST(Quant, WorkedValues) {
  EXPECT_EQ(fp8_ue8m0_scale(0.0f), 105);  // 2^-22
  EXPECT_EQ(fp8_ue8m0_scale(448.0f), 127);
  EXPECT_EQ(fp8_ue8m0_scale(1.0f), 119);  // 2^-8
  EXPECT_EQ(fp4_ue8m0_scale(0.0f), 1);    // 2^-126
  EXPECT_EQ(fp4_e4m3_scale(0.0f), 0x01);  // 2^-9
  // Just past a power-of-two boundary the scale doubles: 448 * (1 + 2^-7) is the next bf16.
  EXPECT_EQ(fp8_ue8m0_scale(452.0f), 128);
  EXPECT_EQ(fp4_ue8m0_scale(6.0f), 127);
  EXPECT_EQ(fp4_ue8m0_scale(6.0625f), 128);
  EXPECT_EQ(fp4_e4m3_scale(6.0f), 0x38);     // s = 1
  EXPECT_EQ(fp4_e4m3_scale(1e6f), 0x7E);     // saturates at 448
  EXPECT_EQ(fp4_e4m3_scale(0.01171875f), 0x01);

  std::vector<float> zeros(32, 0.0f), out(32, 1.0f);
  zeros[3] = -0.0f;
  qdq_fp8_ue8m0(zeros, 32, out);
  for (float v : out) EXPECT_EQ(v, 0.0f);
  EXPECT_TRUE(std::signbit(out[3]));
  std::vector<uint8_t> p(16), s(1);
  quant_fp4_ue8m0(zeros, 32, p, s);
  EXPECT_EQ(s[0], 1);
  EXPECT_EQ(p[1], 0x80);  // element 3 (high nibble of byte 1) keeps -0
  std::vector<uint8_t> p2(8), s2(1);
  quant_fp4_e4m3(std::span<const float>(zeros).first(16), 16, p2, s2);
  EXPECT_EQ(s2[0], 0x01);
}

// Rule (c): the scale is rounded to e4m3, so |x/s| may exceed 6 and is clamped to +-6.
TEST(Quant, Fp4E4m3ClampsPastSix) {
  std::vector<float> x(16, 0.0f);
  x[0] = 6.5f;
  x[1] = -6.5f;
  x[2] = 0.75f;
  std::vector<uint8_t> p(8), s(1);
  quant_fp4_e4m3(x, 16, p, s);
  // 6.5/6 = 1.08333 lies between e4m3 1.0 and 1.125 with midpoint 1.0625, so s = 1.125 (0x39);
  // then 6.5/1.125 = 5.78 -> 6, and 0.75/1.125 = 0.667 -> 0.5.
  EXPECT_EQ(s[0], 0x39);
  EXPECT_EQ(p[0], 0xF7);
  EXPECT_EQ(e2m1_nibble(p[1], 0), 1);
  x[0] = 6.75f;  // 1.125 exactly -> s = 1.125, 6.75/1.125 = 6
  x[1] = 7.0f;   // amax 7: 7/6 = 1.1667 -> s = 1.125 (midpoint 1.1875), 7/1.125 = 6.22 -> clamp 6
  quant_fp4_e4m3(x, 16, p, s);
  EXPECT_EQ(s[0], 0x39);
  EXPECT_EQ(p[0], 0x77);
}

TEST(Quant, V4KvRowQuantizesOnlyNope) {
  std::mt19937 rng(5);
  std::vector<float> row(512);
  for (float& v : row) v = round_bf16(std::ldexp(static_cast<float>(rng() % 2001) - 1000.0f, -9));
  std::vector<float> q = row;
  qdq_v4_kv_row(q);
  for (int b = 0; b < 7; ++b) {
    const RefBlock r = ref_pow2(row.data() + 64 * b, 64, kRef1em4, kRefInv448, 448, e4m3());
    for (int j = 0; j < 64; ++j) EXPECT_EQ(static_cast<double>(q[64 * b + j]), r.deq[j]);
  }
  for (int i = 448; i < 512; ++i) EXPECT_EQ(q[i], row[i]);
}

TEST(Quant, Fp8WeightTiles) {
  std::mt19937 rng(9);
  const int64_t rows = 70, cols = 45, B = 32;  // partial tiles on both axes
  std::vector<float> w(rows * cols);
  for (float& v : w) v = round_bf16(std::ldexp(static_cast<float>(rng() % 4001) - 2000.0f, -(int)(rng() % 20)));
  std::vector<uint8_t> codes(w.size()), scales(3 * 2);
  quant_fp8_weight(w, rows, cols, B, codes, scales);
  std::vector<float> deq(w.size());
  dequant_fp8_weight(codes, scales, rows, cols, B, deq);
  for (int64_t tr = 0; tr < 3; ++tr)
    for (int64_t tc = 0; tc < 2; ++tc) {
      std::vector<float> tile;
      for (int64_t r = tr * B; r < std::min(rows, (tr + 1) * B); ++r)
        for (int64_t c = tc * B; c < std::min(cols, (tc + 1) * B); ++c) tile.push_back(w[r * cols + c]);
      const RefBlock ref = ref_pow2(tile.data(), tile.size(), kRef1em4, kRefInv448, 448, e4m3());
      EXPECT_EQ(scales[tr * 2 + tc], ref.scale);
      size_t j = 0;
      for (int64_t r = tr * B; r < std::min(rows, (tr + 1) * B); ++r)
        for (int64_t c = tc * B; c < std::min(cols, (tc + 1) * B); ++c, ++j) {
          EXPECT_EQ(codes[r * cols + c], ref.codes[j]);
          EXPECT_EQ(static_cast<double>(deq[r * cols + c]), ref.deq[j]);
        }
    }
}

}  // namespace
}  // namespace dsv4
