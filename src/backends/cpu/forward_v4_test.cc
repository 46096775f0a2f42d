// Whole-model exact equalities of the oracle on the V4 / 0731 variant in ref32: pieces == whole
// (splits crossing ratio-4 and ratio-128 groups, the window and the indexer's top-k), verify ==
// steps, rollback, snapshot/restore, batch == alone; also on the 0731 tiny preset.
#include <gtest/gtest.h>

#include <cmath>

#include "backends/cpu/forward.h"
#include "family/deepseek_v41/layer_plan.h"
#include "backends/cpu/oracle_testing.h"
#include "family/deepseek_v41/synthetic_weights.h"
#include "family/deepseek_v41/preset.h"

namespace dsv4::cpu {
namespace {

std::shared_ptr<const family::Model> model() {
  static std::shared_ptr<const family::Model> w = family::synthetic_weights(family::small_v4_test_config(), 17, false);
  return w;
}

std::shared_ptr<const family::Model> tiny() {
  static std::shared_ptr<const family::Model> w = family::synthetic_weights(family::preset_config(family::Preset::tiny, family::Variant::v4), 3, false);
  return w;
}

std::unique_ptr<Oracle> oracle(std::shared_ptr<const family::Model> w, int64_t max_rollback = 16) {
  OracleOptions o;
  o.threads = 2;
  o.max_rollback = max_rollback;
  auto r = Oracle::create(std::move(w), o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return std::move(r).value();
}

using oracle_testing::lcg_prompt;
using oracle_testing::run_pieces;

std::vector<int32_t> prompt(int n, uint32_t seed, int vocab) { return lcg_prompt(n, seed, vocab); }

TEST(OracleV4, LogitsAreFiniteAndDependOnContext) {
  auto o = oracle(model());
  auto a = run_pieces(*o, prompt(9, 1, 512), {9});
  ASSERT_EQ(a.size(), 9u * 512);
  for (float v : a) ASSERT_TRUE(std::isfinite(v));
  auto b = run_pieces(*o, prompt(9, 2, 512), {9});
  EXPECT_NE(std::vector<float>(a.end() - 512, a.end()), std::vector<float>(b.end() - 512, b.end()));
}

// 140 tokens: 35 groups of 4 (top-4 of up to 35 rows), one group of 128 completed at position 127,
// the window of 8 crossed many times; pieces cut inside and across groups of both ratios.
TEST(OracleV4Exact, PiecesEqualWhole) {
  auto o = oracle(model());
  const auto t = prompt(140, 11, 512);
  const auto whole = run_pieces(*o, t, {140});
  const std::vector<std::vector<int>> splits = {
      {1, 139}, {3, 5, 7, 125}, {127, 13}, {126, 1, 1, 12}, {66, 66, 8}, {129, 11}, {9, 118, 1, 1, 11}};
  for (const auto& s : splits) EXPECT_EQ(run_pieces(*o, t, s), whole) << "split of " << s.size() << " pieces";
}

TEST(OracleV4Exact, VerifyWindowEqualsSingleSteps) {
  auto o = oracle(model());
  const auto t = prompt(131, 12, 512);
  // A 6-row verify window over the ratio-128 boundary at 127 versus 6 one-token steps.
  EXPECT_EQ(run_pieces(*o, t, {125, 6}), run_pieces(*o, t, {125, 1, 1, 1, 1, 1, 1}));
}

TEST(OracleV4Exact, RollbackThenRefeedEqualsNeverFed) {
  auto o = oracle(model());
  const auto t = prompt(136, 13, 512), wrong = prompt(9, 99, 512);
  const auto ref = run_pieces(*o, t, {125, 11});
  const int32_t s = o->open_stream();
  ASSERT_TRUE(o->forward({Piece{s, {t.begin(), t.begin() + 125}, {}}}).ok());
  ASSERT_TRUE(o->forward({Piece{s, wrong, {}}}).ok());  // completes groups 31 (ratio 4) and 0 (128)
  ASSERT_TRUE(o->truncate(s, 125).ok());
  std::vector<int32_t> rows(11);
  for (int i = 0; i < 11; ++i) rows[i] = i;
  auto r = o->forward({Piece{s, {t.begin() + 125, t.end()}, rows}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].logits, std::vector<float>(ref.end() - 11 * 512, ref.end()));
}

TEST(OracleV4Exact, SnapshotRestoreEqualsFresh) {
  auto o = oracle(model());
  const auto t = prompt(134, 14, 512);
  const auto ref = run_pieces(*o, t, {134});
  const int32_t a = o->open_stream();
  ASSERT_TRUE(o->forward({Piece{a, {t.begin(), t.begin() + 126}, {}}}).ok());
  auto snap = o->snapshot(a);
  ASSERT_TRUE(snap.ok());
  ASSERT_TRUE(o->forward({Piece{a, prompt(5, 3, 512), {}}}).ok());  // diverge
  const int32_t b = o->open_stream();
  ASSERT_TRUE(o->restore(b, *snap).ok());
  ASSERT_TRUE(o->restore(a, *snap).ok());
  std::vector<int32_t> rows(8);
  for (int i = 0; i < 8; ++i) rows[i] = i;
  for (int32_t s : {a, b}) {
    auto r = o->forward({Piece{s, {t.begin() + 126, t.end()}, rows}});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ((*r)[0].logits, std::vector<float>(ref.end() - 8 * 512, ref.end()));
  }
}

TEST(OracleV4Exact, StreamInBatchEqualsAlone) {
  auto o = oracle(model());
  const auto t1 = prompt(131, 21, 512), t2 = prompt(23, 22, 512), t3 = prompt(17, 23, 512);
  const auto a1 = run_pieces(*o, t1, {125, 6});
  const auto a2 = run_pieces(*o, t2, {20, 3});
  const auto a3 = run_pieces(*o, t3, {16, 1});
  const int32_t s1 = o->open_stream(), s2 = o->open_stream(), s3 = o->open_stream();
  auto all = [](int n) { std::vector<int32_t> r(n); for (int i = 0; i < n; ++i) r[i] = i; return r; };
  auto first = o->forward({Piece{s1, {t1.begin(), t1.begin() + 125}, all(125)},
                           Piece{s2, {t2.begin(), t2.begin() + 20}, all(20)},
                           Piece{s3, {t3.begin(), t3.begin() + 16}, all(16)}});
  ASSERT_TRUE(first.ok());
  auto second = o->forward({Piece{s3, {t3.begin() + 16, t3.end()}, all(1)},
                            Piece{s1, {t1.begin() + 125, t1.end()}, all(6)},
                            Piece{s2, {t2.begin() + 20, t2.end()}, all(3)}});
  ASSERT_TRUE(second.ok());
  auto cat = [](std::vector<float> a, const std::vector<float>& b) { a.insert(a.end(), b.begin(), b.end()); return a; };
  EXPECT_EQ(cat((*first)[0].logits, (*second)[1].logits), a1);
  EXPECT_EQ(cat((*first)[1].logits, (*second)[2].logits), a2);
  EXPECT_EQ(cat((*first)[2].logits, (*second)[0].logits), a3);
}

// The 0731 tiny preset (real vocabulary, ratios 4 and 16, window 16, top-8): pieces == whole
// across groups of both ratios and the window, and verify == steps.
TEST(OracleV4Exact, TinyPresetPiecesAndVerify) {
  auto o = oracle(tiny());
  const auto t = prompt(37, 31, 129280);
  const auto whole = run_pieces(*o, t, {37});
  EXPECT_EQ(run_pieces(*o, t, {15, 2, 16, 4}), whole);
  EXPECT_EQ(run_pieces(*o, t, {31, 6}), run_pieces(*o, t, {31, 1, 1, 1, 1, 1, 1}));
}

// Reference call shapes on V4: decode steps while the ring is not full list positions 0..p then
// the empty slots (V4's get_window_topk_idxs pads at the end, V4.1 puts the empties first), which
// is the canonical list, so a prefill shorter than the window followed by decode steps is equal.
TEST(OracleV4ReferenceShapes, DecodeStepsEqualCanonical) {
  OracleOptions ro;
  ro.threads = 2;
  ro.reference_shapes = true;
  auto ref = std::move(Oracle::create(model(), ro)).value();
  auto canon = oracle(model());
  const auto t = prompt(7, 61, 512);
  std::vector<std::vector<float>> a, b;
  for (Oracle* o : {ref.get(), canon.get()}) {
    auto& out = o == ref.get() ? a : b;
    const int32_t s = o->open_stream();
    out.push_back((*o->forward({Piece{s, {t.begin(), t.begin() + 3}, {2}}}))[0].logits);
    for (int i = 3; i < 7; ++i) out.push_back((*o->forward({Piece{s, {t[i]}, {0}}}))[0].logits);
  }
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "call " << i;
}

}  // namespace
}  // namespace dsv4::cpu
