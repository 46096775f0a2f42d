// The step plan against hand-laid calls: rows, positions, pieces, logit rows and kinds, and every refusal.
#include "engine/step_plan.h"

#include <gtest/gtest.h>

#include <map>

namespace dsv4::engine {
namespace {

const std::map<int32_t, int64_t> kLengths = {{0, 10}, {1, 0}, {2, 99}};

StatusOr<int64_t> length(int32_t s) {
  auto it = kLengths.find(s);
  if (it == kLengths.end()) return error(StatusCode::not_found, "no stream {}", s);
  return it->second;
}

StepLimits limits() { return StepLimits{1000, 100, 64}; }

// A prompt piece of 5 rows (last row's logits), a decode row and a verify window of 3 rows, in one step.
TEST(StepPlan, MixedStepByHand) {
  const std::vector<Piece> pieces = {{1, {5, 6, 7, 8, 9}, {4}}, {2, {11}, {0}}, {0, {20, 21, 22}, {0, 1, 2}}};
  auto p = plan_step(pieces, length, limits());
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->rows(), 9);
  EXPECT_EQ(p->logit_rows(), 5);
  EXPECT_EQ(p->ids, (std::vector<int32_t>{5, 6, 7, 8, 9, 11, 20, 21, 22}));
  EXPECT_EQ(p->pos, (std::vector<int64_t>{0, 1, 2, 3, 4, 99, 10, 11, 12}));
  EXPECT_EQ(p->piece_of, (std::vector<int32_t>{0, 0, 0, 0, 0, 1, 2, 2, 2}));
  EXPECT_EQ(p->logit_index, (std::vector<int64_t>{4, 5, 6, 7, 8}));
  ASSERT_EQ(p->pieces.size(), 3u);
  EXPECT_EQ(p->pieces[2].start, 10);
  EXPECT_EQ(p->pieces[2].row0, 6);
  EXPECT_EQ(p->pieces[2].logit0, 2);
  EXPECT_EQ(p->pieces[0].kind, PieceKind::prompt);
  EXPECT_EQ(p->pieces[1].kind, PieceKind::decode);
  EXPECT_EQ(p->pieces[2].kind, PieceKind::verify);
  EXPECT_EQ(p->count(PieceKind::prompt), 1);
  EXPECT_EQ(p->count(PieceKind::decode), 1);
  EXPECT_EQ(p->count(PieceKind::verify), 1);
}

TEST(StepPlan, RefusesBadPieces) {
  auto code = [](const std::vector<Piece>& pieces, StepLimits l = limits()) {
    return plan_step(pieces, length, l).status().code();
  };
  EXPECT_EQ(code({{7, {1}, {0}}}), StatusCode::not_found);                         // unknown stream
  EXPECT_EQ(code({{0, {1}, {}}, {0, {2}, {}}}), StatusCode::invalid_argument);     // a stream twice
  EXPECT_EQ(code({{0, {1000}, {}}}), StatusCode::invalid_argument);                // token past the vocabulary
  EXPECT_EQ(code({{0, {-1}, {}}}), StatusCode::invalid_argument);
  EXPECT_EQ(code({{0, {1, 2}, {2}}}), StatusCode::invalid_argument);               // logit row outside the piece
  EXPECT_EQ(code({{2, {1, 2}, {}}}), StatusCode::out_of_range);                    // 99 + 2 > context 100
  EXPECT_EQ(code({{1, std::vector<int32_t>(65, 1), {}}}), StatusCode::invalid_argument);  // 65 > 64 rows
  StepLimits open = limits();
  open.max_context = 0;
  open.max_call_rows = 0;
  EXPECT_EQ(code({{2, {1, 2}, {}}, {1, std::vector<int32_t>(65, 1), {}}}, open), StatusCode::ok);  // unbounded
  const std::string m = plan_step({{0, {1}, {}}, {0, {2}, {}}}, length, limits()).status().message();
  EXPECT_NE(m.find("stream 0 appears twice"), std::string::npos) << m;
}

}  // namespace
}  // namespace dsv4::engine
