// Bounded decoder replay on the oracle (docs/replay.md): a replayed prefill equals a full one bit for bit — the
// logits asked for, every later decode step and draft, and every byte of the stream's state (rings,
// compressed and index-key rows, projection rings, DSpark rings) — in one piece, in pieces, with scoring
// pieces, beside decode rows and verify windows, and after a rollback into the prompt; and it computes
// fewer rows.
#include <gtest/gtest.h>

#include <algorithm>

#include "backends/cpu/forward.h"
#include "backends/cpu/oracle_testing.h"
#include "family/deepseek_v41/synthetic_weights.h"
#include "family/deepseek_v41/preset.h"

namespace dsv4::cpu {
namespace {

// The oracle's small config: 8 layers, window 8, KV sources 2 and 4 (layer 4 the candidate source), DSpark
// taps 5-7, so layers 4-7 are bounded; rings of 8 + 4 rows.
std::shared_ptr<const family::Model> small_model() {
  static std::shared_ptr<const family::Model> m = family::synthetic_weights(family::small_test_config(), 5, true);
  return m;
}

std::unique_ptr<Oracle> oracle(std::shared_ptr<const family::Model> m, bool replay, int64_t rollback = 4) {
  OracleOptions o;
  o.threads = 2;
  o.max_rollback = rollback;
  o.bounded_replay = replay;
  auto r = Oracle::create(std::move(m), o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return std::move(r).value();
}

std::vector<int32_t> prompt(int n, uint32_t seed) { return oracle_testing::lcg_prompt(n, seed, 512); }

int32_t argmax(const std::vector<float>& v, int64_t vocab, int64_t row) {
  return static_cast<int32_t>(std::max_element(v.begin() + row * vocab, v.begin() + (row + 1) * vocab) -
                              (v.begin() + row * vocab));
}

// Both oracles fed the same pieces of one stream (sizes, logit rows per piece); every piece's logits and the
// snapshot after it must agree; then `steps` greedy decode steps and the draft after each.
struct Pair {
  std::unique_ptr<Oracle> replay, full;
  int32_t a = 0, b = 0;
  Pair(std::shared_ptr<const family::Model> m, int64_t rollback = 4)
      : replay(oracle(m, true, rollback)), full(oracle(m, false, rollback)) {
    a = replay->open_stream();
    b = full->open_stream();
  }
  // Feeds one piece to both; returns the replayed side's logits after checking the full side's.
  std::vector<float> feed(const std::vector<int32_t>& tokens, const std::vector<int32_t>& rows) {
    auto x = replay->forward({Piece{a, tokens, rows}});
    auto y = full->forward({Piece{b, tokens, rows}});
    EXPECT_TRUE(x.ok() && y.ok());
    if (!x.ok() || !y.ok()) return {};
    EXPECT_EQ((*x)[0].logits, (*y)[0].logits);
    EXPECT_EQ(*replay->snapshot(a), *full->snapshot(b));
    return (*x)[0].logits;
  }
  void decode(std::vector<float> logits, int steps) {
    const int64_t V = replay->config().vocab;
    for (int i = 0; i < steps; ++i) {
      const int32_t next = argmax(logits, V, static_cast<int64_t>(logits.size()) / V - 1);
      auto da = replay->draft(a, next), db = full->draft(b, next);
      ASSERT_TRUE(da.ok() && db.ok());
      EXPECT_EQ(da->tokens, db->tokens);
      EXPECT_EQ(da->logits, db->logits);
      logits = feed({next}, {0});
    }
  }
};

std::vector<int32_t> span(const std::vector<int32_t>& t, int from, int n) { return {t.begin() + from, t.begin() + from + n}; }

TEST(BoundedReplay, OnePieceEqualsFullPrefill) {
  const auto t = prompt(64, 3);
  Pair p(small_model());
  const auto logits = p.feed(t, {63});
  ASSERT_EQ(logits.size(), 512u);
  p.decode(logits, 8);
}

// Layers 4-7 of a 64-row piece with its last row's logits, rings of 12 rows (by hand from replay.h): layer 7
// computes that row; it reads its input at the ring rows [52, 64), so layer 6 computes those 12; layer 6 reads
// back W - 1 = 7 rows further (45), layer 5 computes 19, layer 4 26. Layers 0-3 compute every row.
TEST(BoundedReplay, WorkShrinks) {
  auto r = oracle(small_model(), true), f = oracle(small_model(), false);
  const auto t = prompt(64, 3);
  ASSERT_TRUE(r->forward({Piece{r->open_stream(), t, {63}}}).ok());
  ASSERT_TRUE(f->forward({Piece{f->open_stream(), t, {63}}}).ok());
  EXPECT_EQ(r->replay_shape().from, 4);
  EXPECT_EQ(r->layer_rows(), (std::vector<int64_t>{64, 64, 64, 64, 26, 19, 12, 1}));
  EXPECT_EQ(f->layer_rows(), std::vector<int64_t>(8, 64));
  // A piece without logits computes nothing at the last layer.
  auto r2 = oracle(small_model(), true);
  ASSERT_TRUE(r2->forward({Piece{r2->open_stream(), t, {}}}).ok());
  EXPECT_EQ(r2->layer_rows(), (std::vector<int64_t>{64, 64, 64, 64, 26, 19, 12, 0}));
}

// Pieces ending where the prompt cache keeps snapshots: each piece computes its own cone, so the state after
// every piece equals a full prefill's (checked by feed()).
TEST(BoundedReplay, PiecesEqualFullPrefill) {
  const auto t = prompt(130, 4);
  Pair p(small_model());
  p.feed(span(t, 0, 48), {});
  p.feed(span(t, 48, 1), {});
  p.feed(span(t, 49, 40), {});
  const auto logits = p.feed(span(t, 89, 41), {40});
  p.decode(logits, 8);
}

// Scoring pieces (prompt logprobs, forced tokens): every logit row asked for, dense or sparse, at any row.
TEST(BoundedReplay, ScoringPiecesEqualFullPrefill) {
  const auto t = prompt(150, 5);
  Pair p(small_model());
  std::vector<int32_t> dense;
  for (int i = 30; i < 70; ++i) dense.push_back(i);
  p.feed(span(t, 0, 70), dense);
  p.feed(span(t, 70, 60), {2, 59});
  const auto logits = p.feed(span(t, 130, 20), {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19});
  p.decode(logits, 3);
}

// One call: a bounded prompt piece beside a decode row and a verify window of other streams.
TEST(BoundedReplay, MixedStepEqualsFull) {
  const auto t1 = prompt(90, 6), t2 = prompt(30, 7), t3 = prompt(25, 8);
  auto r = oracle(small_model(), true), f = oracle(small_model(), false);
  for (Oracle* o : {r.get(), f.get()}) {
    ASSERT_EQ(o->open_stream(), 0);
    ASSERT_EQ(o->open_stream(), 1);
    ASSERT_EQ(o->open_stream(), 2);
    ASSERT_TRUE(o->forward({Piece{1, span(t2, 0, 29), {}}, Piece{2, span(t3, 0, 20), {}}}).ok());
  }
  const std::vector<Piece> step = {Piece{1, {t2[29]}, {0}}, Piece{0, t1, {89}}, Piece{2, span(t3, 20, 5), {0, 1, 2, 3, 4}}};
  auto x = r->forward(step);
  auto y = f->forward(step);
  ASSERT_TRUE(x.ok() && y.ok());
  for (size_t i = 0; i < step.size(); ++i) EXPECT_EQ((*x)[i].logits, (*y)[i].logits) << "piece " << i;
  for (int32_t s : {0, 1, 2}) EXPECT_EQ(*r->snapshot(s), *f->snapshot(s)) << "stream " << s;
  EXPECT_LT(r->layer_rows()[7], 90 + 1 + 5);
}

// A rollback of max_rollback rows into a replayed piece reads the ring rows the cone kept for it.
TEST(BoundedReplay, RollbackIntoThePieceEqualsFull) {
  const auto t = prompt(80, 9), other = prompt(4, 10);
  Pair p(small_model());
  p.feed(t, {79});
  ASSERT_TRUE(p.replay->truncate(p.a, 76).ok());
  ASSERT_TRUE(p.full->truncate(p.b, 76).ok());
  p.feed(other, {0, 1, 2, 3});
}

// The tiny preset (10 layers, window 16, layers 5-9 bounded; rings of 20 rows) in one piece and in two.
TEST(BoundedReplay, TinyPresetEqualsFullPrefill) {
  static std::shared_ptr<const family::Model> m =
      family::synthetic_weights(family::preset_config(family::Preset::tiny, family::Variant::v41), 11, true);
  const auto t = prompt(100, 12);
  {
    Pair p(m);
    const auto logits = p.feed(t, {99});
    EXPECT_EQ(p.replay->replay_shape().from, 5);
    // By hand: layer 9 the logit row; 8 the ring rows [80, 100); each layer below 15 rows further back.
    EXPECT_EQ(p.replay->layer_rows(), (std::vector<int64_t>{100, 100, 100, 100, 100, 65, 50, 35, 20, 1}));
    p.decode(logits, 4);
  }
  Pair p(m);
  p.feed(span(t, 0, 64), {});
  EXPECT_EQ(p.replay->layer_rows(), (std::vector<int64_t>{64, 64, 64, 64, 64, 64, 50, 35, 20, 0}));
  p.decode(p.feed(span(t, 64, 36), {35}), 4);
}

}  // namespace
}  // namespace dsv4::cpu
