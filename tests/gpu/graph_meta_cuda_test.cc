// CUDA graphs of decode and verify calls against an eager twin, bit for bit, on the preset and variant of
// DSV4_GPU_PRESET / DSV4_GPU_VARIANT (tiny, v41 by default):
// - a replayed graph reads the call's tables where this call put them, whatever the sizes of the parts of the call's
//   metadata the graph does not read (token masks, the list of whole rows): one of two streams under a token mask on
//   the steps that capture a key and not on those that replay it;
// - graphs are keyed by the call's rows (with the position bound and the logit rows), not by its piece count nor by
//   the groups its positions complete: calls of 4 rows as 4 decode rows, 2 windows of 2, or 1 window of 4, at
//   positions completing different groups, replay one graph.
#include <gtest/gtest.h>

#include <memory>

#include "backends/cuda/forward/forward.h"
#include "forward_testing.h"
#include "lanes/token_mask.h"
#include "preset_weights_testing.h"

namespace dsv4::cuda {
namespace {

using namespace gpu_testing;  // prompt, argmax
using engine::Piece;
using engine::RowDraw;

// The same weights in two forwards: g with CUDA graphs, e eager.
struct Twins {
  std::shared_ptr<const ModelDevice> model;
  std::unique_ptr<Forward> g, e;
};
Twins twins() {
  Twins t;
  t.model = gpu_testing::upload(chosen_preset_weights(3));
  if (!t.model) return t;
  ForwardOptions o;
  o.max_context = 1024;
  o.max_rollback = 16;
  o.max_call_rows = 256;
  auto g = Forward::create(t.model, o), e = Forward::create(t.model, o);
  if (!g.ok() || !e.ok()) return t;
  t.g = std::move(*g);
  t.e = std::move(*e);
  t.e->set_cuda_graphs(false);
  return t;
}

TEST(GraphMeta, ReplaysFollowTheCallsTablesPastMasks) {
  Twins t = twins();
  ASSERT_TRUE(t.g && t.e);
  Forward &G = *t.g, &E = *t.e;
  const std::shared_ptr<const ModelDevice>& model = t.model;
  const int64_t V = model->config.vocab;
  lanes::TokenMask every(static_cast<int32_t>(V));  // allows every id: the same token as no mask
  for (int32_t t = 0; t < V; ++t) every.allow(t);
  int32_t a[2], b[2];
  for (int k = 0; k < 2; ++k) {
    Forward& f = k == 0 ? G : E;
    a[k] = *f.open_stream();
    b[k] = *f.open_stream();
    ASSERT_TRUE(f.forward({Piece{a[k], prompt(40, 1), {}}, Piece{b[k], prompt(41, 2), {}}}).ok());
  }
  int32_t ta = 7, tb = 9;
  for (int step = 0; step < 10; ++step) {
    // Keys alternate with the ratio-2 groups a step completes; each key runs eagerly once, is captured the second
    // time and replayed after: masked on steps 2 and 3 (the captures), not on the replays.
    const bool masked = step == 2 || step == 3;
    std::vector<engine::PieceResult> out[2];
    for (int k = 0; k < 2; ++k) {
      RowDraw argmax;
      argmax.kind = RowDraw::Kind::argmax;
      if (masked) argmax.mask = &every;
      RowDraw whole;  // Kind::whole
      auto r = (k == 0 ? G : E).forward({Piece{a[k], {ta}, {0}, {}, {argmax}}, Piece{b[k], {tb}, {0}, {}, {whole}}});
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      out[k] = std::move(*r);
    }
    ASSERT_EQ(out[0][0].picks.size(), 1u);
    ASSERT_EQ(out[1][0].picks.size(), 1u);
    EXPECT_EQ(out[0][0].picks[0].token, out[1][0].picks[0].token) << "step " << step;
    ASSERT_EQ(out[1][1].logits.size(), static_cast<size_t>(V));
    EXPECT_TRUE(out[0][1].logits == out[1][1].logits) << "step " << step;
    ta = out[1][0].picks[0].token;
    tb = static_cast<int32_t>(argmax(out[1][1].logits.data(), V));
  }
  EXPECT_GT(G.graph_stats().replays, 0);
}

TEST(GraphMeta, OneGraphPerRowCount) {
  Twins t = twins();
  ASSERT_TRUE(t.g && t.e);
  Forward &G = *t.g, &E = *t.e;
  const std::shared_ptr<const ModelDevice>& model = t.model;
  const int64_t V = model->config.vocab;
  int32_t s[2][4];
  for (int k = 0; k < 2; ++k) {
    Forward& f = k == 0 ? G : E;
    std::vector<Piece> fill;
    for (int i = 0; i < 4; ++i) {
      s[k][i] = *f.open_stream();
      fill.push_back(Piece{s[k][i], prompt(30 + 3 * i, i), {}});
    }
    ASSERT_TRUE(f.forward(fill).ok());
  }
  int32_t next = 11;
  for (int step = 0; step < 9; ++step) {
    // 4 rows a call: decode rows of 4 streams, windows of 2 rows of 2 streams, or one window of 4; every shape
    // rolled back after, so each call starts where the streams were (positions of other parities on every shape).
    const int shape = step % 3;
    std::vector<engine::PieceResult> out[2];
    for (int k = 0; k < 2; ++k) {
      Forward& f = k == 0 ? G : E;
      std::vector<Piece> call;
      const int n = shape == 0 ? 4 : shape == 1 ? 2 : 1, T = 4 / n;
      for (int i = 0; i < n; ++i) {
        std::vector<int32_t> t(T), rows(T);
        for (int j = 0; j < T; ++j) t[j] = next + i + j, rows[j] = j;
        call.push_back(Piece{s[k][i], t, rows});
      }
      std::vector<int64_t> held;
      for (const Piece& p : call) held.push_back(*f.length(p.stream));
      auto r = f.forward(call);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      out[k] = std::move(*r);
      // Keep one row of the first piece (positions move on by one), drop the rest.
      for (size_t i = 0; i < call.size(); ++i) ASSERT_TRUE(f.truncate(call[i].stream, held[i] + (i == 0 ? 1 : 0)).ok());
    }
    ASSERT_EQ(out[0].size(), out[1].size());
    for (size_t i = 0; i < out[0].size(); ++i) EXPECT_TRUE(out[0][i].logits == out[1][i].logits) << "step " << step;
    next = static_cast<int32_t>(argmax(out[1][0].logits.data(), V));
  }
  // Every call had 4 rows and 4 logit rows under one position bound: one graph, captured once.
  EXPECT_EQ(G.graph_stats().captures, 1);
  EXPECT_GT(G.graph_stats().replays, 0);
}

}  // namespace
}  // namespace dsv4::cuda
