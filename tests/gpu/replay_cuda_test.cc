// Bounded decoder replay on CUDA (docs/replay.md), on the preset and variant of DSV4_GPU_PRESET /
// DSV4_GPU_VARIANT (tiny, v41 by default): a replayed prefill equals a full one on the same device bit for bit —
// the logits asked for, the snapshot the prompt cache keeps, every later decode step and draft — in one
// piece, in pieces, with scoring pieces, beside decode rows and verify windows, after a rollback into the
// prompt; and each layer computes the rows the oracle computes (V4-Flash-0731: every row, it has no decoder).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "forward_testing.h"
#include "preset_weights_testing.h"
#include "backends/cpu/forward.h"
#include "family/deepseek_v41/synthetic_weights.h"
#include "backends/cuda/forward/forward.h"
#include "family/deepseek_v41/preset.h"

namespace dsv4::cuda {
namespace {

using namespace gpu_testing;  // prompts, rows, argmax, preset_name, variant_name
using engine::Piece;

constexpr int64_t kRollback = 16;

std::shared_ptr<const family::Model> weights() {
  static std::shared_ptr<const family::Model> w = chosen_preset_weights(3);
  return w;
}

std::unique_ptr<Forward> cuda_forward(bool replay) {
  static std::shared_ptr<const ModelDevice> model;
  if (!model) model = gpu_testing::upload(weights());
  if (!model) return nullptr;
  ForwardOptions o;
  o.max_context = 8192;
  o.max_rollback = kRollback;
  o.max_call_rows = 4096;
  o.bounded_replay = replay;
  auto f = Forward::create(model, o);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  return f.ok() ? std::move(*f) : nullptr;
}

// A prompt length whose cone leaves rows out at the first bounded layer: twice the cone of a long piece.
int64_t binding_length(const Forward& f) {
  const family::ReplayShape& s = f.replay_shape();
  if (!s.bounded()) return 300;
  const int64_t T = 1 << 20;
  return std::min<int64_t>(2 * (T - family::cone_first_rows(s, T, T - 1)[0]), 4096);
}

// Both forwards fed the same pieces of one stream: every piece's logits and the snapshot after it agree.
struct Pair {
  std::unique_ptr<Forward> replay, full;
  int32_t a = -1, b = -1;
  Pair() : replay(cuda_forward(true)), full(cuda_forward(false)) {
    if (!replay || !full) return;
    a = *replay->open_stream();
    b = *full->open_stream();
  }
  std::vector<float> feed(const std::vector<int32_t>& tokens, const std::vector<int32_t>& rows) {
    auto x = replay->forward({Piece{a, tokens, rows}});
    auto y = full->forward({Piece{b, tokens, rows}});
    EXPECT_TRUE(x.ok()) << x.status().to_string();
    EXPECT_TRUE(y.ok()) << y.status().to_string();
    if (!x.ok() || !y.ok()) return {};
    EXPECT_TRUE((*x)[0].logits == (*y)[0].logits) << "logits differ after " << tokens.size() << " rows";
    auto sa = replay->snapshot(a), sb = full->snapshot(b);
    EXPECT_TRUE(sa.ok() && sb.ok());
    if (sa.ok() && sb.ok()) EXPECT_TRUE(*sa == *sb) << "snapshots differ after " << tokens.size() << " rows";
    return (*x)[0].logits;
  }
  // Greedy decode steps (CUDA graphs on both) and the draft before each.
  void decode(std::vector<float> logits, int steps) {
    const int64_t V = weights()->config.vocab_size;
    for (int i = 0; i < steps && !logits.empty(); ++i) {
      const int32_t next = static_cast<int32_t>(argmax(&logits[logits.size() - V], V));
      if (replay->model().dspark) {
        auto da = replay->draft(a, next), db = full->draft(b, next);
        ASSERT_TRUE(da.ok() && db.ok());
        EXPECT_EQ(da->tokens, db->tokens);
        EXPECT_TRUE(da->logits == db->logits) << "draft " << i;
      }
      logits = feed({next}, {0});
    }
  }
};

std::vector<int32_t> span(const std::vector<int32_t>& t, int64_t from, int64_t n) {
  return {t.begin() + from, t.begin() + from + n};
}

TEST(CudaReplay, OnePieceEqualsFullPrefill) {
  Pair p;
  ASSERT_TRUE(p.replay && p.full);
  const int64_t T = binding_length(*p.replay);
  const auto t = prompt(static_cast<int>(T), 21);
  const auto logits = p.feed(t, {static_cast<int32_t>(T - 1)});
  std::printf("%s %s: %lld-row piece, rows per layer with bounded replay:", preset_name().c_str(), variant_name().c_str(),
              static_cast<long long>(T));
  for (int64_t r : p.replay->layer_rows()) std::printf(" %lld", static_cast<long long>(r));
  std::printf("\n");
  p.decode(logits, 8);
}

// Each layer computes the rows the oracle computes for the same call (the plan's cones, executed by both);
// fewer than the piece's rows on V4.1 from the first bounded layer on, every row on 0731.
TEST(CudaReplay, RowsPerLayerMatchTheOracle) {
  auto f = cuda_forward(true);
  ASSERT_TRUE(f);
  const int64_t T = binding_length(*f);
  const auto t = prompt(static_cast<int>(T), 22);
  ASSERT_TRUE(f->forward({Piece{*f->open_stream(), t, {static_cast<int32_t>(T - 1)}}}).ok());
  cpu::OracleOptions o;
  o.max_rollback = kRollback;
  auto oracle = std::move(cpu::Oracle::create(weights(), o)).value();
  ASSERT_TRUE(oracle->forward({Piece{oracle->open_stream(), t, {static_cast<int32_t>(T - 1)}}}).ok());
  EXPECT_EQ(f->layer_rows(), oracle->layer_rows());
  const family::ReplayShape& s = f->replay_shape();
  if (weights()->config.variant == family::Variant::v4) {
    EXPECT_FALSE(s.bounded());
    EXPECT_EQ(f->layer_rows(), std::vector<int64_t>(f->config().n_layers, T));
  } else {
    ASSERT_TRUE(s.bounded());
    EXPECT_LT(f->layer_rows()[s.from], T);
    EXPECT_EQ(f->layer_rows().back(), 1);
  }
}

// Pieces as the lane core cuts them (no logits until the last): each computes its own cone.
TEST(CudaReplay, PiecesEqualFullPrefill) {
  Pair p;
  ASSERT_TRUE(p.replay && p.full);
  const int64_t T = binding_length(*p.replay);
  const auto t = prompt(static_cast<int>(T + 200), 23);
  p.feed(span(t, 0, T / 2), {});
  p.feed(span(t, T / 2, 1), {});
  p.feed(span(t, T / 2 + 1, T / 2 - 1), {});
  p.decode(p.feed(span(t, T, 200), {199}), 8);
}

// Scoring pieces (prompt logprobs, forced tokens): dense and sparse logit rows.
TEST(CudaReplay, ScoringPiecesEqualFullPrefill) {
  Pair p;
  ASSERT_TRUE(p.replay && p.full);
  const int64_t T = binding_length(*p.replay);
  const auto t = prompt(static_cast<int>(T + 64), 24);
  std::vector<int32_t> dense;
  for (int64_t i = T / 2; i < T; ++i) dense.push_back(static_cast<int32_t>(i));
  p.feed(span(t, 0, T), dense);
  p.decode(p.feed(span(t, T, 64), {3, 63}), 2);
}

// One call: a bounded prompt piece beside a decode row and a verify window of other streams.
TEST(CudaReplay, MixedStepEqualsFull) {
  auto r = cuda_forward(true), f = cuda_forward(false);
  ASSERT_TRUE(r && f);
  const int64_t T = binding_length(*r);
  const auto t1 = prompt(static_cast<int>(T), 25), t2 = prompt(40, 26), t3 = prompt(30, 27);
  std::vector<std::vector<float>> out[2];
  std::vector<std::vector<uint8_t>> snaps[2];
  Forward* both[2] = {r.get(), f.get()};
  for (int k = 0; k < 2; ++k) {
    Forward& F = *both[k];
    const int32_t s0 = *F.open_stream(), s1 = *F.open_stream(), s2 = *F.open_stream();
    ASSERT_TRUE(F.forward({Piece{s1, span(t2, 0, 39), {}}, Piece{s2, span(t3, 0, 25), {}}}).ok());
    auto x = F.forward({Piece{s1, {t2[39]}, {0}}, Piece{s0, t1, {static_cast<int32_t>(T - 1)}},
                        Piece{s2, span(t3, 25, 5), all_rows(5)}});
    ASSERT_TRUE(x.ok()) << x.status().to_string();
    for (const auto& pr : *x) out[k].push_back(pr.logits);
    for (int32_t s : {s0, s1, s2}) snaps[k].push_back(*F.snapshot(s));
  }
  for (size_t i = 0; i < out[0].size(); ++i) EXPECT_TRUE(out[0][i] == out[1][i]) << "piece " << i;
  for (size_t i = 0; i < snaps[0].size(); ++i) EXPECT_TRUE(snaps[0][i] == snaps[1][i]) << "stream " << i;
}

// A rollback of max_rollback rows into a replayed piece reads the ring rows its cone kept.
TEST(CudaReplay, RollbackIntoThePieceEqualsFull) {
  Pair p;
  ASSERT_TRUE(p.replay && p.full);
  const int64_t T = binding_length(*p.replay);
  p.feed(prompt(static_cast<int>(T), 28), {static_cast<int32_t>(T - 1)});
  ASSERT_TRUE(p.replay->truncate(p.a, T - kRollback).ok());
  ASSERT_TRUE(p.full->truncate(p.b, T - kRollback).ok());
  p.decode(p.feed(prompt(static_cast<int>(kRollback), 29), all_rows(static_cast<int>(kRollback))), 2);
}

}  // namespace
}  // namespace dsv4::cuda
