// The oracle behind the lane Backend contract: windows == steps with keyed draws, keep, drafts (every request of a
// call in one batched draft of the forward), snapshots into fresh streams, and refusals.
#include "backends/cpu/oracle_forward.h"

#include <gtest/gtest.h>

#include "family/deepseek_v41/synthetic_weights.h"

namespace dsv4::cpu {
namespace {

std::unique_ptr<engine::LaneBackend> backend(bool v4 = false) {
  static std::shared_ptr<const family::Model> v41 = family::synthetic_weights(family::small_test_config(), 7, true);
  static std::shared_ptr<const family::Model> v4w = family::synthetic_weights(family::small_v4_test_config(), 17, false);
  const std::shared_ptr<const family::Model>& w = v4 ? v4w : v41;
  OracleOptions o;
  o.threads = 2;
  o.max_rollback = 16;
  engine::LaneBackendOptions options;
  options.model_id = "test-synthetic";
  auto b = oracle_lane_backend(w, o, options);
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  return std::move(b).value();
}

lanes::StreamSpec sampled() {
  lanes::StreamSpec s;
  s.sampling.temperature = 0.8f;
  s.seed = 1234;
  s.max_rows = 100;
  return s;
}

std::vector<int32_t> toks(int n, uint32_t seed) {
  std::vector<int32_t> t(n);
  for (auto& x : t) { seed = seed * 1664525u + 1013904223u; x = static_cast<int32_t>((seed >> 8) % 512); }
  return t;
}

TEST(OracleLaneBackend, WindowEqualsSingleRowWindows) {
  auto b = backend();
  const auto t = toks(24, 3);
  ASSERT_TRUE(b->open(1, sampled()).ok());
  ASSERT_TRUE(b->open(2, sampled()).ok());
  std::vector<lanes::Piece> pieces = {{1, 0, {t.data(), 18}}, {2, 0, {t.data(), 11}}};
  ASSERT_TRUE(b->prefill(pieces).ok());
  lanes::Piece rest{2, 11, {t.data() + 11, 7}};
  ASSERT_TRUE(b->prefill({&rest, 1}).ok());
  std::vector<std::vector<lanes::RowResult>> whole, step;
  lanes::Window w{1, 18, {t.begin() + 18, t.end()}, true, 3};
  ASSERT_TRUE(b->verify({&w, 1}, &whole).ok());
  for (int i = 0; i < 6; ++i) {
    lanes::Window s{2, 18 + i, {t[18 + i]}, true, 3};
    std::vector<std::vector<lanes::RowResult>> r;
    ASSERT_TRUE(b->verify({&s, 1}, &r).ok());
    EXPECT_EQ(r[0][0].token, whole[0][i].token) << i;
    EXPECT_EQ(r[0][0].logprob, whole[0][i].logprob) << i;
    ASSERT_EQ(r[0][0].top.size(), 3u);
    EXPECT_EQ(r[0][0].top[0].token, whole[0][i].top[0].token);
  }
  // keep: back to 20 rows, then the same window tail again.
  ASSERT_TRUE(b->keep(1, 20).ok());
  lanes::Window again{1, 20, {t.begin() + 20, t.end()}, true, 0};
  std::vector<std::vector<lanes::RowResult>> r2;
  ASSERT_TRUE(b->verify({&again, 1}, &r2).ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(r2[0][i].logprob, whole[0][i + 2].logprob);
  // A window that does not start at the stream's rows is refused.
  lanes::Window bad{1, 3, {5}, false, 0};
  EXPECT_FALSE(b->verify({&bad, 1}, &r2).ok());
}

// One step of a prompt piece and a verify window (one forward call) equals the piece and the window fed apart:
// the window's draws and logprobs, and the prompt stream's later rows, bit for bit.
TEST(OracleLaneBackend, MixedStepEqualsPrefillThenVerify) {
  const auto t = toks(30, 5);
  auto apart = backend();
  auto mixed = backend();
  for (auto* b : {apart.get(), mixed.get()}) {
    ASSERT_TRUE(b->open(1, sampled()).ok());
    ASSERT_TRUE(b->open(2, sampled()).ok());
    lanes::Piece first{1, 0, {t.data(), 12}};
    ASSERT_TRUE(b->prefill({&first, 1}).ok());
  }
  lanes::Piece prompt{2, 0, {t.data() + 3, 20}};
  lanes::Window w{1, 12, {t.begin() + 12, t.begin() + 17}, true, 2};
  std::vector<std::vector<lanes::RowResult>> a, m, none;
  ASSERT_TRUE(apart->prefill({&prompt, 1}).ok());
  ASSERT_TRUE(apart->verify({&w, 1}, &a).ok());
  ASSERT_TRUE(mixed->step({&prompt, 1}, {&w, 1}, &m).ok());
  ASSERT_EQ(m.size(), 1u);
  ASSERT_EQ(m[0].size(), a[0].size());
  for (size_t i = 0; i < a[0].size(); ++i) {
    EXPECT_EQ(m[0][i].token, a[0][i].token) << i;
    EXPECT_EQ(m[0][i].logprob, a[0][i].logprob) << i;
    EXPECT_EQ(m[0][i].proposed_logprob, a[0][i].proposed_logprob) << i;
  }
  lanes::Window next{2, 20, {t[23], t[24]}, true, 0};
  std::vector<std::vector<lanes::RowResult>> an, mn;
  ASSERT_TRUE(apart->verify({&next, 1}, &an).ok());
  ASSERT_TRUE(mixed->verify({&next, 1}, &mn).ok());
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(mn[0][i].logprob, an[0][i].logprob) << i;
  // A step with nothing in it is no forward call; a bad piece fails the whole step.
  EXPECT_TRUE(mixed->step({}, {}, &none).ok());
  EXPECT_TRUE(none.empty());
  lanes::Piece bad{2, 3, {t.data(), 2}};
  lanes::Window w2{1, 17, {t[17]}, false, 0};
  EXPECT_FALSE(mixed->step({&bad, 1}, {&w2, 1}, &none).ok());
}

TEST(OracleLaneBackend, DraftsAndSnapshots) {
  auto b = backend();
  const auto t = toks(20, 9);
  ASSERT_TRUE(b->open(7, sampled()).ok());
  lanes::Piece p{7, 0, {t.data(), 19}};
  ASSERT_TRUE(b->prefill({&p, 1}).ok());
  std::vector<lanes::DraftProposal> d;
  lanes::DraftRequest q{7, t[19], 19, 3};
  ASSERT_TRUE(b->draft({&q, 1}, &d).ok());
  ASSERT_EQ(d[0].tokens.size(), 3u);
  for (float pr : d[0].probabilities) EXPECT_TRUE(pr > 0.0f && pr <= 1.0f);
  auto snap = b->snapshot(7);
  ASSERT_TRUE(snap.ok());
  ASSERT_TRUE(b->open(8, sampled()).ok());
  ASSERT_TRUE(b->restore(8, *snap, 19).ok());
  std::vector<lanes::DraftProposal> d2;
  lanes::DraftRequest q2{8, t[19], 19, 3};
  ASSERT_TRUE(b->draft({&q2, 1}, &d2).ok());
  EXPECT_EQ(d2[0].tokens, d[0].tokens);
  EXPECT_EQ(d2[0].probabilities, d[0].probabilities);
  // Wrong row count: refused, and the stream is left empty and usable.
  ASSERT_TRUE(b->open(9, sampled()).ok());
  EXPECT_FALSE(b->restore(9, *snap, 18).ok());
  lanes::Piece fresh{9, 0, {t.data(), 4}};
  EXPECT_TRUE(b->prefill({&fresh, 1}).ok());
  b->release(9);
  EXPECT_FALSE(b->keep(9, 0).ok());
}

// A StreamForward passing every call to the oracle's, counting the drafts it is asked for.
class CountingForward final : public engine::StreamForward {
 public:
  explicit CountingForward(std::unique_ptr<engine::StreamForward> f) : f_(std::move(f)) {}
  const family::ModelPlan& config() const override { return f_->config(); }
  bool has_drafter() const override { return f_->has_drafter(); }
  uint32_t snapshot_version() const override { return f_->snapshot_version(); }
  StatusOr<int32_t> open_stream() override { return f_->open_stream(); }
  Status close_stream(int32_t s) override { return f_->close_stream(s); }
  StatusOr<int64_t> length(int32_t s) const override { return f_->length(s); }
  StatusOr<std::vector<engine::PieceResult>> forward(const std::vector<engine::Piece>& p) override {
    return f_->forward(p);
  }
  Status truncate(int32_t s, int64_t n) override { return f_->truncate(s, n); }
  StatusOr<std::vector<uint8_t>> snapshot(int32_t s) const override { return f_->snapshot(s); }
  Status restore(int32_t s, const std::vector<uint8_t>& b) override { return f_->restore(s, b); }
  StatusOr<engine::DraftResult> draft(int32_t s, int32_t next) override {
    ++single;
    return f_->draft(s, next);
  }
  StatusOr<std::vector<engine::DraftResult>> draft_batch(std::span<const engine::DraftAsk> asks, bool logits) override {
    batches.push_back(asks.size());
    EXPECT_FALSE(logits);  // the lane adapter never needs the draft logits
    return f_->draft_batch(asks, logits);
  }
  std::vector<size_t> batches;  // asks per draft_batch call
  int single = 0;               // draft calls from outside draft_batch

 private:
  std::unique_ptr<engine::StreamForward> f_;
};

// Every request of one draft call goes to the forward in one draft_batch (empty streams left out, proposing
// nothing), and each proposal equals the one the same request gets alone.
TEST(OracleLaneBackend, DraftRequestsGoInOneBatch) {
  static std::shared_ptr<const family::Model> w = family::synthetic_weights(family::small_test_config(), 7, true);
  OracleOptions o;
  o.threads = 2;
  o.max_rollback = 16;
  auto oracle = Oracle::create(w, o);
  ASSERT_TRUE(oracle.ok()) << oracle.status().to_string();
  auto counting = std::make_unique<CountingForward>(oracle_stream_forward(std::move(*oracle)));
  CountingForward* count = counting.get();
  engine::LaneBackendOptions options;
  options.model_id = "test-synthetic";
  auto made = engine::LaneBackend::create(std::move(counting), o.max_rollback, options);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  engine::LaneBackend& b = **made;
  ASSERT_GT(b.info().max_draft_depth, 0);
  const int lengths[] = {6, 0, 19, 11};  // stream 2 holds no rows yet
  std::vector<std::vector<int32_t>> t;
  std::vector<lanes::DraftRequest> requests;
  for (int k = 0; k < 4; ++k) {
    const lanes::StreamId id = static_cast<lanes::StreamId>(k + 1);
    t.push_back(toks(lengths[k] + 1, 30 + k));
    ASSERT_TRUE(b.open(id, sampled()).ok());
    if (lengths[k] > 0) {
      lanes::Piece p{id, 0, {t[k].data(), static_cast<size_t>(lengths[k])}};
      ASSERT_TRUE(b.prefill({&p, 1}).ok());
    }
    requests.push_back(lanes::DraftRequest{id, t[k][lengths[k]], lengths[k], 1 + k});
  }
  std::vector<lanes::DraftProposal> together;
  ASSERT_TRUE(b.draft(requests, &together).ok());
  EXPECT_EQ(count->batches, std::vector<size_t>{3});
  EXPECT_EQ(count->single, 0);
  ASSERT_EQ(together.size(), 4u);
  EXPECT_TRUE(together[1].tokens.empty());
  for (int k = 0; k < 4; ++k) {
    std::vector<lanes::DraftProposal> one;
    ASSERT_TRUE(b.draft({&requests[k], 1}, &one).ok());
    if (k != 1) EXPECT_EQ(together[k].tokens.size(), static_cast<size_t>(requests[k].depth)) << k;
    EXPECT_EQ(one[0].tokens, together[k].tokens) << k;
    EXPECT_EQ(one[0].probabilities, together[k].probabilities) << k;
  }
  EXPECT_EQ(count->batches, (std::vector<size_t>{3, 1, 1, 1}));  // the empty stream's lone request asks nothing
  // A request at the wrong position is refused before anything is drafted.
  lanes::DraftRequest bad = requests[0];
  bad.position += 1;
  const std::vector<lanes::DraftRequest> with_bad = {requests[2], bad};
  std::vector<lanes::DraftProposal> none;
  EXPECT_FALSE(b.draft(with_bad, &none).ok());
  EXPECT_EQ(count->batches.size(), 4u);
}

TEST(OracleLaneBackend, SplitSnapshotsJoinAcrossEntries) {
  // Parts taken at 9 rows (from 0) and at 19 rows (from 9) join into the 19-row state: the restored stream's
  // windows and drafts equal the original's. 9 is odd, so a ratio-2 group straddles the two parts; on V4 a ratio-4
  // group does, and the window's first group (positions 16..19) pools the restored overlap group 12..15.
  for (bool v4 : {false, true}) {
  SCOPED_TRACE(v4 ? "v4" : "v4.1");
  auto b = backend(v4);
  ASSERT_FALSE(b->info().row_tables.empty());
  const auto t = toks(24, 5);
  ASSERT_TRUE(b->open(1, sampled()).ok());
  lanes::Piece p1{1, 0, {t.data(), 9}};
  ASSERT_TRUE(b->prefill({&p1, 1}).ok());
  auto first = b->snapshot_parts(1, 0);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  lanes::Piece p2{1, 9, {t.data() + 9, 10}};
  ASSERT_TRUE(b->prefill({&p2, 1}).ok());
  auto second = b->snapshot_parts(1, 9);
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(second->rows.size(), b->info().row_tables.size());
  // Each table holds exactly its rows of positions [9, 19).
  for (size_t i = 0; i < second->rows.size(); ++i) {
    const lanes::RowTable& table = b->info().row_tables[i];
    EXPECT_EQ(static_cast<int64_t>(second->rows[i].size()),
              (19 / table.positions_per_row - 9 / table.positions_per_row) * table.row_bytes) << i;
  }
  std::vector<lanes::RowChunks> tables;
  for (size_t i = 0; i < second->rows.size(); ++i) tables.push_back({first->rows[i], second->rows[i]});
  ASSERT_TRUE(b->open(2, sampled()).ok());
  ASSERT_TRUE(b->restore_parts(2, second->bounded, tables, 19).ok());
  std::vector<lanes::DraftProposal> d1, d2;
  lanes::DraftRequest q1{1, t[19], 19, 3}, q2{2, t[19], 19, 3};
  if (b->info().max_draft_depth > 0) {
    ASSERT_TRUE(b->draft({&q1, 1}, &d1).ok());
    ASSERT_TRUE(b->draft({&q2, 1}, &d2).ok());
    EXPECT_EQ(d2[0].tokens, d1[0].tokens);
    EXPECT_EQ(d2[0].probabilities, d1[0].probabilities);
  }
  std::vector<std::vector<lanes::RowResult>> r1, r2;
  lanes::Window w1{1, 19, {t.begin() + 19, t.end()}, true, 0}, w2{2, 19, {t.begin() + 19, t.end()}, true, 0};
  ASSERT_TRUE(b->verify({&w1, 1}, &r1).ok());
  ASSERT_TRUE(b->verify({&w2, 1}, &r2).ok());
  for (size_t i = 0; i < r1[0].size(); ++i) {
    EXPECT_EQ(r2[0][i].token, r1[0][i].token) << i;
    EXPECT_EQ(r2[0][i].logprob, r1[0][i].logprob) << i;
  }
  // Only the later part's rows (a table short of rows): refused, the stream left empty and usable.
  std::vector<lanes::RowChunks> short_tables;
  for (size_t i = 0; i < second->rows.size(); ++i) short_tables.push_back({second->rows[i]});
  ASSERT_TRUE(b->open(3, sampled()).ok());
  EXPECT_FALSE(b->restore_parts(3, second->bounded, short_tables, 19).ok());
  lanes::Piece fresh{3, 0, {t.data(), 4}};
  EXPECT_TRUE(b->prefill({&fresh, 1}).ok());
  // Whole-snapshot bytes are not a bounded part.
  auto whole = b->snapshot(1);
  ASSERT_TRUE(whole.ok());
  ASSERT_TRUE(b->open(4, sampled()).ok());
  EXPECT_FALSE(b->restore_parts(4, *whole, tables, 19).ok());
  }
}

}  // namespace
}  // namespace dsv4::cpu
