// KV rows: sizes, byte layout decoded independently, and unpack(pack(x)) == qdq(x) exactly.
#include "core/kv_rows.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/bf16.h"
#include "core/codec_oracle_testing.h"
#include "core/quant.h"

namespace dsv4 {
namespace {

using testing::code_value;

// bf16 rows with per-block magnitudes spread over many binades; `zeros` forces whole zero blocks.
std::vector<float> random_row(std::mt19937& rng, int n, bool zeros) {
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) {
    const int exp = static_cast<int>((i / 16) % 24) - 16 + static_cast<int>(rng() % 4);
    float v = std::ldexp(1.0f + static_cast<float>(rng() % 128) / 128.0f, exp);
    if (zeros && (i / 32) % 3 == 0) v = 0.0f;
    x[i] = round_bf16(rng() % 2 ? -v : v);
  }
  return x;
}

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  int bad = 0;
  for (size_t i = 0; i < a.size(); ++i)
    bad += testing::float_to_bits(a[i]) != testing::float_to_bits(b[i]);
  EXPECT_EQ(bad, 0);
}

std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> b(x.size());
  for (size_t i = 0; i < x.size(); ++i) b[i] = f32_to_bf16(x[i]);
  return b;
}

// model-spec.md §4.2 and §8.
TEST(KvRows, ByteSizes) {
  EXPECT_EQ(kKvFp8RowBytes, 528u);
  EXPECT_EQ(kKvFp4RowBytes, 288u);
  EXPECT_EQ(kIndexKeyRowBytes, 68u);
  EXPECT_EQ(kKvModel1RowBytes, 584u);
  EXPECT_EQ(kKvFp8ScaleOffset + 512 / 32, kKvFp8RowBytes);
  EXPECT_EQ(kKvFp4ScaleOffset + 512 / 16, kKvFp4RowBytes);
  EXPECT_EQ(kIndexKeyScaleOffset + 128 / 32, kIndexKeyRowBytes);
  EXPECT_EQ(kKvModel1ScaleOffset + 448 / 64 + 1, kKvModel1RowBytes);
}

// The general sizes at the tiny preset's widths (d = 128, index d = 128, r = 64), by the layouts of
// model-spec.md §4.2 and §8: 128 + 4, 64 + 8, 64 + 4, and 64 + 1 + 128 + 1.
TEST(KvRows, ByteSizesOfOtherWidths) {
  EXPECT_EQ(kv_row_bytes(KvRowFormat::fp8_ue8m0_32, 128), 132);
  EXPECT_EQ(kv_row_bytes(KvRowFormat::fp4_e4m3_16, 128), 72);
  EXPECT_EQ(kv_row_bytes(KvRowFormat::fp4_ue8m0_32, 128), 68);
  EXPECT_EQ(kv_row_bytes(KvRowFormat::model1, 128, 64), 194);
}

TEST(KvRows, Fp8WindowRow) {
  const testing::Grid e4m3 = testing::e4m3_grid();
  std::mt19937 rng(1);
  for (int t = 0; t < 200; ++t) {
    const std::vector<float> x = random_row(rng, 512, t % 2);
    std::vector<uint8_t> row(528), row2(528);
    pack_kv_fp8_row(x, row);
    pack_kv_fp8_row(to_bf16(x), row2);
    EXPECT_EQ(row, row2);
    std::vector<float> got(512), want(512), indep(512);
    unpack_kv_fp8_row(row, got);
    qdq_fp8_ue8m0(x, 32, want);
    expect_same_bits(got, want);
    for (int i = 0; i < 512; ++i)
      indep[i] = static_cast<float>(code_value(e4m3, row[i]) * std::ldexp(1.0, row[512 + i / 32] - 127));
    expect_same_bits(indep, want);
  }
  std::vector<float> zero(512, 0.0f), out(512);
  std::vector<uint8_t> row(528);
  pack_kv_fp8_row(zero, row);
  for (int i = 0; i < 512; ++i) EXPECT_EQ(row[i], 0);
  for (int b = 0; b < 16; ++b) EXPECT_EQ(row[512 + b], 105);  // 2^-22 (formats.md §3.6)
}

TEST(KvRows, Fp4CompressedRow) {
  const testing::Grid e4m3 = testing::e4m3_grid(), e2m1 = testing::e2m1_grid();
  std::mt19937 rng(2);
  for (int t = 0; t < 200; ++t) {
    const std::vector<float> x = random_row(rng, 512, t % 2);
    std::vector<uint8_t> row(288), row2(288);
    pack_kv_fp4_row(x, row);
    pack_kv_fp4_row(to_bf16(x), row2);
    EXPECT_EQ(row, row2);
    std::vector<float> got(512), want(512), indep(512);
    unpack_kv_fp4_row(row, got);
    qdq_fp4_e4m3(x, 16, want);
    expect_same_bits(got, want);
    for (int i = 0; i < 512; ++i) {
      const int nib = i % 2 ? row[i / 2] >> 4 : row[i / 2] & 15;  // even dim in the low nibble
      indep[i] = static_cast<float>(code_value(e2m1, nib) * code_value(e4m3, row[256 + i / 16]));
    }
    expect_same_bits(indep, want);
  }
  std::vector<float> zero(512, 0.0f);
  std::vector<uint8_t> row(288);
  pack_kv_fp4_row(zero, row);
  for (int b = 0; b < 32; ++b) EXPECT_EQ(row[256 + b], 0x01);  // 2^-9
}

TEST(KvRows, IndexKeyRow) {
  const testing::Grid e2m1 = testing::e2m1_grid();
  std::mt19937 rng(3);
  for (int t = 0; t < 400; ++t) {
    const std::vector<float> x = random_row(rng, 128, t % 2);
    std::vector<uint8_t> row(68), row2(68);
    pack_index_key_row(x, row);
    pack_index_key_row(to_bf16(x), row2);
    EXPECT_EQ(row, row2);
    std::vector<float> got(128), want(128), indep(128);
    unpack_index_key_row(row, got);
    qdq_fp4_ue8m0(x, 32, want);
    expect_same_bits(got, want);
    for (int i = 0; i < 128; ++i) {
      const int nib = i % 2 ? row[i / 2] >> 4 : row[i / 2] & 15;
      indep[i] = static_cast<float>(code_value(e2m1, nib) * std::ldexp(1.0, row[64 + i / 32] - 127));
    }
    expect_same_bits(indep, want);
  }
  std::vector<float> zero(128, 0.0f);
  std::vector<uint8_t> row(68);
  pack_index_key_row(zero, row);
  for (int b = 0; b < 4; ++b) EXPECT_EQ(row[64 + b], 1);  // 2^-126
}

TEST(KvRows, Model1Row) {
  const testing::Grid e4m3 = testing::e4m3_grid(), bf16 = testing::bf16_grid();
  std::mt19937 rng(4);
  for (int t = 0; t < 200; ++t) {
    const std::vector<float> x = random_row(rng, 512, t % 2);
    std::vector<uint8_t> row(584, 0xAA), row2(584);
    pack_kv_model1_row(x, row);
    pack_kv_model1_row(to_bf16(x), row2);
    EXPECT_EQ(row, row2);
    EXPECT_EQ(row[583], 0);
    std::vector<float> got(512), want = x, indep(512);
    unpack_kv_model1_row(row, got);
    qdq_v4_kv_row(want);
    expect_same_bits(got, want);
    for (int i = 0; i < 448; ++i)
      indep[i] = static_cast<float>(code_value(e4m3, row[i]) * std::ldexp(1.0, row[576 + i / 64] - 127));
    for (int i = 0; i < 64; ++i)  // little-endian bf16
      indep[448 + i] = static_cast<float>(code_value(bf16, row[448 + 2 * i] | (row[449 + 2 * i] << 8)));
    expect_same_bits(indep, want);
    for (int i = 448; i < 512; ++i) EXPECT_EQ(got[i], x[i]);
  }
}

}  // namespace
}  // namespace dsv4
