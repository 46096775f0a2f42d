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

// Given embedding rows: their call rows and values in order, image flags per call row (empty without any image row),
// and every refusal.
TEST(StepPlan, GivenEmbeddingRows) {
  const std::vector<uint16_t> v(2 * 6, 7);  // D = 2: three rows, then two rows
  std::vector<Piece> pieces = {{0, {1, 2}, {}}, {1, {3, 4, 5, 6, 7}, {4}}};
  pieces[1].embeds.push_back(EmbedRows{1, 3, std::span<const uint16_t>(v).first(6), true});
  pieces[1].embeds.push_back(EmbedRows{4, 1, std::span<const uint16_t>(v).subspan(6, 2), false});
  StepLimits l = limits();
  l.dim = 2;
  auto p = plan_step(pieces, length, l);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_EQ(p->given.size(), 4u);
  EXPECT_EQ(p->given[0].row, 3);
  EXPECT_EQ(p->given[2].row, 5);
  EXPECT_EQ(p->given[3].row, 6);
  EXPECT_EQ(p->given[1].values, v.data() + 2);
  EXPECT_EQ(p->given[3].values, v.data() + 6);
  EXPECT_EQ(p->image, (std::vector<uint8_t>{0, 0, 0, 1, 1, 1, 0}));
  auto alone = plan_step({pieces[1]}, length, l);  // the image rows in the call's first piece
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(alone->image, (std::vector<uint8_t>{0, 1, 1, 1, 0}));
  auto text = plan_step({{0, {1, 2}, {}}}, length, l);
  ASSERT_TRUE(text.ok());
  EXPECT_TRUE(text->given.empty());
  EXPECT_TRUE(text->image.empty());

  auto refused = [&](std::vector<Piece> ps, StepLimits lim, const char* needle) {
    auto r = plan_step(ps, length, lim);
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  refused(pieces, limits(), "takes no given embedding rows");
  std::vector<Piece> overlap = pieces;
  overlap[1].embeds[1].offset = 3;
  refused(overlap, l, "overlap or leave");
  std::vector<Piece> outside = pieces;
  outside[1].embeds[1].offset = 5;
  refused(outside, l, "overlap or leave");
  std::vector<Piece> size = pieces;
  size[1].embeds[0].values = std::span<const uint16_t>(v).first(5);
  refused(size, l, "hold 5 values, not 3 x 2");
}

}  // namespace
}  // namespace dsv4::engine
