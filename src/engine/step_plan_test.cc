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

// Bounded replay with a hand-made shape (layers 2 and 3 bounded, window 4, rings of 6 rows): a 20-row prompt
// piece without logits keeps its ring rows [14, 20) at layer 2 and nothing at layer 3; a decode row and a
// 3-row verify window keep every row. Values worked out by hand from the rule in family/deepseek_v41/replay.h.
TEST(StepPlan, BoundedRowsByHand) {
  family::ReplayShape shape;
  shape.from = 2;
  shape.n_layers = 4;
  shape.window = 4;
  shape.state_rows = 6;
  shape.tap.assign(4, 0);
  StepLimits l = limits();
  l.replay = &shape;
  std::vector<int32_t> prompt(20, 3);
  const std::vector<Piece> pieces = {{1, prompt, {}}, {2, {11}, {0}}, {0, {20, 21, 22}, {0, 1, 2}}};
  auto p = plan_step(pieces, length, l);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->bounded_from, 2);
  ASSERT_EQ(p->layer_out.size(), 2u);
  EXPECT_EQ(p->out_rows(2).first, (std::vector<int64_t>{14, 0, 0}));
  EXPECT_EQ(p->out_rows(3).first, (std::vector<int64_t>{20, 0, 0}));
  EXPECT_EQ(p->out_rows(2).rows, 10);
  EXPECT_EQ(p->out_rows(3).rows, 4);
  EXPECT_EQ(p->out_rows(3).row0, (std::vector<int64_t>{0, 0, 1}));
  EXPECT_EQ(p->in_rows(2), p->all);
  EXPECT_EQ(p->in_rows(3), p->out_rows(2));
  EXPECT_EQ(p->out_rows(1), p->all);
  EXPECT_TRUE(p->shrinks(2) && p->shrinks(3));
  EXPECT_FALSE(p->shrinks(1));
  EXPECT_TRUE(p->bounded());
  EXPECT_EQ(p->taps.first, (std::vector<int64_t>{14, 0, 0}));
  EXPECT_EQ(call_rows(p->pieces, p->out_rows(2)), (std::vector<int64_t>{14, 15, 16, 17, 18, 19, 20, 21, 22, 23}));
  EXPECT_EQ(rows_within(p->pieces, p->out_rows(3), p->out_rows(2)), (std::vector<int64_t>{6, 7, 8, 9}));
  EXPECT_EQ(space_positions(p->pieces, p->out_rows(2)), (std::vector<int64_t>{14, 15, 16, 17, 18, 19, 99, 10, 11, 12}));
  EXPECT_EQ(space_pieces(p->pieces, p->out_rows(3)), (std::vector<int32_t>{1, 2, 2, 2}));
  // The same step with its prompt's last row asked for: layer 3 computes that row, layer 2 its window too
  // (rows [16, 20) lie within the ring rows).
  std::vector<Piece> last = pieces;
  last[0].logit_rows = {19};
  auto q = plan_step(last, length, l);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->out_rows(3).first, (std::vector<int64_t>{19, 0, 0}));
  EXPECT_EQ(q->out_rows(2).first, (std::vector<int64_t>{14, 0, 0}));
  // Decode rows and verify windows alone: nothing shrinks.
  auto r = plan_step({pieces[1], pieces[2]}, length, l);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->bounded());
  EXPECT_EQ(r->out_rows(3), r->all);
  // Without a shape: every layer on every row, the taps too.
  auto u = plan_step(pieces, length, limits());
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->bounded_from, -1);
  EXPECT_EQ(u->out_rows(3), u->all);
  EXPECT_EQ(u->taps, u->all);
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
