// Component tests of the oracle's ops against independent expected values: model-spec.md
// tables and vectors, closed forms, and values computed separately in Python integers.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "backends/cpu/attention.h"
#include "backends/cpu/held_weights_testing.h"
#include "backends/cpu/kv_rows.h"
#include "backends/cpu/linear.h"
#include "backends/cpu/mhc.h"
#include "backends/cpu/moe.h"
#include "backends/cpu/rope.h"

namespace dsv4::cpu {
namespace {

// ---- mHC Sinkhorn (§3.5) ----

// Equal logits keep every entry equal; the scalar recurrence of the spec's passes is the
// expected value: softmax 1/C + eps, then x <- x / (C x + eps) per pass (19 row + 20 column).
TEST(Sinkhorn, EqualLogitsFollowTheScalarRecurrence) {
  const int C = 4;
  double A[16];
  for (double& a : A) a = 0.37;
  sinkhorn<double>(A, C, 20, 1e-6);
  long double x = 1.0L / C + 1e-6L;
  for (int pass = 0; pass < 39; ++pass) x = x / (C * x + 1e-6L);
  for (double a : A) EXPECT_NEAR(a, static_cast<double>(x), 1e-15);
}

// Arbitrary logits: positive entries, columns sum to 1 up to the eps terms (the last pass is a
// column pass), rows close to 1 after 20 passes.
TEST(Sinkhorn, DoublyStochasticAfterTwentyPasses) {
  float A[16] = {3.0f, -1.0f, 0.5f, 2.0f, -2.0f, 0.0f, 1.5f, 0.25f,
                 1.0f, 1.0f, -3.0f, 0.75f, 0.1f, 2.5f, -0.5f, -1.25f};
  sinkhorn<float>(A, 4, 20, 1e-6f);
  for (int k = 0; k < 4; ++k) {
    float col = 0, row = 0;
    for (int j = 0; j < 4; ++j) { col += A[j * 4 + k]; row += A[k * 4 + j]; EXPECT_GT(A[j * 4 + k], 0.0f); }
    EXPECT_NEAR(col, 1.0f, 1e-5f);
    EXPECT_NEAR(row, 1.0f, 2e-3f);
  }
}

// ---- router softplus threshold (§3.7, §6.2) ----
TEST(Softplus, ReturnsTheInputAboveTwenty) {
  EXPECT_EQ(softplus<double>(21.0), 21.0);  // log1p(e^21) = 21 + 7.6e-10 would differ
  EXPECT_EQ(softplus<double>(20.5), 20.5);
  EXPECT_NE(softplus<double>(19.0), 19.0);
  EXPECT_NEAR(softplus<double>(19.0), 19.0 + 5.602796406145941e-09, 1e-14);  // 19 + log1p(e^-19)
  EXPECT_NEAR(softplus<double>(0.0), 0.6931471805599453, 1e-15);             // ln 2
}

// ---- RoPE / YaRN (§3.2) ----
TEST(Rope, PlainFrequenciesStartAtOne) {
  RopeParams p;
  p.base = 10000;
  const auto f = rope_frequencies(p);
  ASSERT_EQ(f.size(), 32u);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_NEAR(f[16], 0.01, 1e-9);  // 10000^(-1/2)
  for (int i = 1; i < 32; ++i) EXPECT_LT(f[i], f[i - 1]);
}

// Base 160000: low = 15, high = 25 (spec [CALC]): i <= 15 unscaled, i >= 25 divided by 16, a
// blend between, evaluated as f/16*(1-smooth) + f*smooth with smooth = 1 - ramp. In fp32,
// 1 - (1 - ramp) != ramp exactly at i = 16, 17, 19 (ramp 0.1, 0.2, 0.4), the three cases the spec
// names; the blend must use the spec's form there.
TEST(Rope, YarnBandAndTheExactBlendForm) {
  RopeParams plain, yarn;
  plain.base = yarn.base = 160000;
  yarn.original_seq_len = 65536;
  const auto f = rope_frequencies(plain), g = rope_frequencies(yarn);
  for (int i = 0; i <= 15; ++i) EXPECT_EQ(g[i], f[i]) << i;
  for (int i = 25; i < 32; ++i) EXPECT_EQ(g[i], f[i] / 16.0f) << i;
  for (int i = 16; i <= 24; ++i) {
    EXPECT_LT(g[i], f[i]);
    EXPECT_GT(g[i], f[i] / 16.0f);
    volatile float ramp = (static_cast<float>(i) - 15.0f) / 10.0f;
    volatile float smooth = 1.0f - ramp;
    volatile float one_minus_smooth = 1.0f - smooth;
    const bool differs = one_minus_smooth != ramp;
    EXPECT_EQ(differs, i == 16 || i == 17 || i == 19) << i;
    volatile float a = (f[i] / 16.0f) * one_minus_smooth;
    volatile float b = f[i] * smooth;
    EXPECT_EQ(g[i], a + b) << i;
  }
}

TEST(Rope, RotationAndInverseOnInterleavedPairs) {
  RopeParams p;
  p.dim = 4;
  p.base = 10000;
  const auto f = rope_frequencies(p);  // {1, 0.01}
  float x[4] = {1.0f, 0.0f, 0.0f, 1.0f};
  rope_apply<double>(x, f, 1, false);
  // (1 + 0i) * e^{i*1} and (0 + 1i) * e^{i*0.01}, each -> bf16.
  EXPECT_EQ(x[0], round_bf16(static_cast<float>(std::cos(1.0))));
  EXPECT_EQ(x[1], round_bf16(static_cast<float>(std::sin(1.0))));
  EXPECT_EQ(x[2], round_bf16(static_cast<float>(-std::sin(0.01))));
  EXPECT_EQ(x[3], round_bf16(static_cast<float>(std::cos(0.01))));
}

// ---- indexer top-k and candidate blocks (§3.6, §6.2) ----
TEST(Indexer, TopkBreaksTiesByLowerRowAndReturnsAscendingRows) {
  const std::vector<float> s = {1.0f, 3.0f, 2.0f, 3.0f, 2.0f, 2.0f, -1.0f};
  EXPECT_EQ(select_topk_rows(s, 3), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(select_topk_rows(s, 4), (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(select_topk_rows(s, 10), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6}));
  const float ninf = -std::numeric_limits<float>::infinity();
  // Masked (-inf) rows are taken last, lowest row first.
  EXPECT_EQ(select_topk_rows({ninf, 0.5f, ninf, ninf}, 2), (std::vector<int32_t>{0, 1}));
}

TEST(Indexer, CandidateBlocksForceTheLastRowsBlockAndDropMinusInf) {
  const float ninf = -std::numeric_limits<float>::infinity();
  // 9 rows in blocks of 2: block maxima {0.5, 4, 2, 4, x}; block 4 (row 8) is forced in.
  std::vector<float> s = {0.5f, 0.0f, 4.0f, 1.0f, 2.0f, -1.0f, 3.0f, 4.0f, -5.0f};
  EXPECT_EQ(select_candidate_rows(s, 9, 2, 2), (std::vector<uint8_t>{0, 0, 1, 1, 0, 0, 0, 0, 1}));
  EXPECT_EQ(select_candidate_rows(s, 9, 3, 2), (std::vector<uint8_t>{0, 0, 1, 1, 0, 0, 1, 1, 1}));
  // A block whose rows are all -inf is never kept, even with room to spare.
  std::vector<float> t = {ninf, ninf, 1.0f, ninf, ninf};
  EXPECT_EQ(select_candidate_rows(t, 5, 3, 2), (std::vector<uint8_t>{0, 0, 1, 1, 1}));
}

// ---- sparse attention with a sink (§3.6) ----
TEST(SparseAttention, OneKeyAndASink) {
  std::vector<float> q(32, 0.0f), k(32, 0.0f), o(32);
  q[0] = 2.0f;
  k[0] = 1.5f;
  k[5] = -0.75f;
  const float sink = 0.25f;
  const float scale = 0.125f;
  sparse_attend_head<double>(q.data(), {k.data()}, 32, scale, sink, o.data());
  // s = 2*1.5*0.125 = 0.375 is the max, so P = 1 exactly; o = k / (1 + e^(sink - s)).
  const double denom = 1.0 + std::exp(0.25 - 0.375);
  EXPECT_EQ(o[0], round_bf16(static_cast<float>(1.5 / denom)));
  EXPECT_EQ(o[5], round_bf16(static_cast<float>(-0.75 / denom)));
  EXPECT_EQ(o[1], 0.0f);
}

TEST(SparseAttention, NoValidKeyGivesZeros) {
  std::vector<float> q(32, 1.0f), o(32, 9.0f);
  sparse_attend_head<float>(q.data(), {nullptr, nullptr}, 32, 0.1f, 3.0f, o.data());
  for (float v : o) EXPECT_EQ(v, 0.0f);
}

// ---- FP8 linear on exactly representable values (§3.1) ----
TEST(Fp8Linear, ExactWhenNothingRounds) {
  // x = [1, 0.5, -0.25, 0 ...] (amax 1 -> scale 2^-8, codes 256, 128, -64: exact in e4m3).
  std::vector<float> x(32, 0.0f);
  x[0] = 1.0f; x[1] = 0.5f; x[2] = -0.25f;
  std::vector<float> w(64, 0.0f);
  w[0] = 3.0f; w[1] = -2.0f; w[2] = 8.0f;  // row 0: 3 - 1 - 2 = 0 -> times scale
  w[32] = 1.0f; w[33] = 1.0f; w[34] = 1.0f;  // row 1: 1.25
  held_testing::HeldWeights held;
  const family::Fp8Linear W = held.fp8(2, 32, 32, w, {0.5f});
  std::vector<float> y(2);
  ThreadPool pool(2);
  fp8_linear<float>(pool, x.data(), 1, W, y.data(), 32);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.625f);
}

// ---- double -> bf16 in one rounding ----
TEST(Bf16, DoubleRoundsOnceNotTwice) {
  // 1 + 2^-8 + 2^-30 lies just above the bf16 midpoint 1 + 2^-8: the correct bf16 is 1 + 2^-7;
  // rounding to float first lands on the midpoint and then ties to even (1.0).
  const double d = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  EXPECT_EQ(round_bf16(d), 1.0 + std::ldexp(1.0, -7));
  EXPECT_EQ(round_bf16(static_cast<float>(d)), 1.0f);
  EXPECT_EQ(round_bf16(-d), -(1.0 + std::ldexp(1.0, -7)));
}

}  // namespace
}  // namespace dsv4::cpu

#include "core/kv_rows.h"

namespace dsv4::cpu {
namespace {

// At the release widths the oracle's generic packed rows are byte-identical to core's production
// layouts (528 B window, 288 B compressed, 68 B index key).
TEST(KvRows, GenericPackingMatchesCoreLayoutsAt512And128) {
  std::vector<float> x(512), k(128);
  uint32_t s = 5;
  for (auto& v : x) { s = s * 1664525u + 1013904223u; v = round_bf16(static_cast<float>(static_cast<int32_t>(s) >> 8) * 1e-6f); }
  for (int i = 0; i < 128; ++i) k[i] = x[i * 3];
  std::vector<uint8_t> a(528), b(528);
  pack_row(KvRowFormat::fp8_ue8m0_32, x.data(), 512, a.data());
  dsv4::pack_kv_fp8_row(std::span<const float>(x), std::span<uint8_t>(b));
  EXPECT_EQ(a, b);
  a.assign(288, 0); b.assign(288, 0);
  pack_row(KvRowFormat::fp4_e4m3_16, x.data(), 512, a.data());
  dsv4::pack_kv_fp4_row(std::span<const float>(x), std::span<uint8_t>(b));
  EXPECT_EQ(a, b);
  a.assign(68, 0); b.assign(68, 0);
  pack_row(KvRowFormat::fp4_ue8m0_32, k.data(), 128, a.data());
  dsv4::pack_index_key_row(std::span<const float>(k), std::span<uint8_t>(b));
  EXPECT_EQ(a, b);
  EXPECT_EQ(kv_row_bytes(KvRowFormat::fp8_ue8m0_32, 512), 528);
  EXPECT_EQ(kv_row_bytes(KvRowFormat::fp4_e4m3_16, 512), 288);
  EXPECT_EQ(kv_row_bytes(KvRowFormat::fp4_ue8m0_32, 128), 68);
}

}  // namespace
}  // namespace dsv4::cpu
