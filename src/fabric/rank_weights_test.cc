// A rank's slice of the model's views (rank_weights.h) at TP 2 and 4 on a tiny V4.1 shape with the DSpark
// drafter: the ranks' slices put side by side give back every cut tensor of the whole model element for element
// (values read from the whole model by index arithmetic) in the layers and the drafter's stages alike, each
// routed expert is held whole by exactly its owner, wo_b and the shared expert stay whole, the head and the
// embedding hold the rank's vocabulary rows, the Markov head stays whole, the rank config names the per-rank
// head and group counts, and mismatched plans are refused by name.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "family/deepseek_v41/synthetic_weights.h"
#include "fabric/rank_weights.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/tensors.h"

namespace dsv4::fabric {
namespace {

// The tiny V4.1 shape with 4 heads in 4 output groups (8 experts), so TP 4 gives each rank one head, one
// group and two experts.
family::Config tiny4() {
  family::Config c = family::preset_config(family::Preset::tiny, family::Variant::v41);
  c.o_groups = 4;
  return c;
}

std::shared_ptr<const family::Model> whole_weights(const family::Config& c) {
  return family::synthetic_weights(c, 7, true);
}

// Whether rows [0, n) of `got` are rows [b, b + n) of `want` byte for byte (row-major views along dim 0).
bool same_rows(const TensorView& got, const TensorView& want, int64_t b, int64_t n) {
  const int64_t row = want.nbytes / want.dim(0);
  return got.dim(0) == n && got.nbytes == n * row && std::memcmp(got.data, want.bytes() + b * row, n * row) == 0;
}
bool same(const TensorView& a, const TensorView& b) {
  return a.shape == b.shape && a.nbytes == b.nbytes && std::memcmp(a.data, b.data, a.nbytes) == 0;
}

// One block's cut (a layer or a DSpark stage) on rank r of tp against the whole block.
void expect_block_cut(const family::LayerWeights& A, const family::LayerWeights& W, int32_t r, int32_t tp,
                      const std::string& name) {
  SCOPED_TRACE(name);
  // wq_b: rows of heads [r*H/tp, (r+1)*H/tp), each head_dim rows; scale rows per 32.
  const int64_t qrows = W.wq_b.out() / tp;
  ASSERT_EQ(A.wq_b.out(), qrows);
  ASSERT_EQ(A.wq_b.in(), W.wq_b.in());
  EXPECT_TRUE(same_rows(A.wq_b.weight, W.wq_b.weight, r * qrows, qrows)) << "wq_b rank " << r;
  EXPECT_TRUE(same_rows(A.wq_b.scale, W.wq_b.scale, r * qrows / 32, qrows / 32)) << "wq_b scale rank " << r;
  const int64_t heads = W.attn_sink.dim(0) / tp;
  EXPECT_TRUE(same_rows(A.attn_sink, W.attn_sink, r * heads, heads));
  // wo_a: the rank's group rows; wo_b reads every rank's groups and stays whole.
  const int64_t grows = W.wo_a.out() / tp;
  ASSERT_EQ(A.wo_a.out(), grows);
  ASSERT_EQ(A.wo_a.in(), W.wo_a.in());
  EXPECT_TRUE(same_rows(A.wo_a.weight, W.wo_a.weight, r * grows, grows));
  EXPECT_TRUE(same_rows(A.wo_a.scale, W.wo_a.scale, r * grows / 32, grows / 32));
  EXPECT_TRUE(same(A.wo_b.weight, W.wo_b.weight) && same(A.wo_b.scale, W.wo_b.scale));
  // Replicated attention weights are untouched.
  EXPECT_TRUE(same(A.wkv.weight, W.wkv.weight));
  EXPECT_TRUE(same(A.wq_a.weight, W.wq_a.weight));
  // Routed experts: expert e whole on rank e / (E / tp), none held elsewhere; ids stay global.
  ASSERT_EQ(A.experts.size(), W.experts.size());
  const size_t per = W.experts.size() / static_cast<size_t>(tp);
  for (size_t e = 0; e < W.experts.size(); ++e) {
    const bool mine = e / per == static_cast<size_t>(r);
    for (auto [a, b] : {std::pair{&A.experts[e].w1, &W.experts[e].w1}, std::pair{&A.experts[e].w2, &W.experts[e].w2},
                        std::pair{&A.experts[e].w3, &W.experts[e].w3}}) {
      if (mine) {
        EXPECT_EQ(a->out(), b->out());
        EXPECT_EQ(a->in(), b->in());
        EXPECT_TRUE(same(a->weight, b->weight) && same(a->scale, b->scale));
      } else {
        EXPECT_FALSE(a->held());
        EXPECT_EQ(a->out(), 0);
      }
    }
  }
  // Shared expert: whole.
  EXPECT_TRUE(same(A.shared_w1.weight, W.shared_w1.weight));
  EXPECT_TRUE(same(A.shared_w2.weight, W.shared_w2.weight));
  EXPECT_TRUE(same(A.shared_w3.scale, W.shared_w3.scale));
  EXPECT_TRUE(same(A.gate_weight.weight, W.gate_weight.weight));  // the router is replicated
}

class RankWeightsTest : public ::testing::TestWithParam<int32_t> {};

TEST_P(RankWeightsTest, RanksTogetherGiveBackTheWholeModel) {
  const int32_t tp = GetParam();
  const family::Config fc = tiny4();
  auto plan = make_split_plan(fc, family::expected_tensors(fc), tp, ExpertSplit::expert_parallel);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  std::shared_ptr<const family::Model> whole = whole_weights(fc);
  const family::Config& wc = whole->config;
  const family::ModelWeights& ww = whole->weights;
  const int last = wc.num_hidden_layers - 1;
  for (int32_t r = 0; r < tp; ++r) {
    auto m = rank_model(*whole, *plan, r);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    const family::ModelWeights& w = (*m)->weights;
    EXPECT_EQ((*m)->config.num_attention_heads, 4 / tp);
    EXPECT_EQ((*m)->config.o_groups, 4 / tp);
    EXPECT_EQ((*m)->config.moe_intermediate_size, wc.moe_intermediate_size);
    EXPECT_EQ((*m)->config.vocab_size, wc.vocab_size);
    EXPECT_EQ((*m)->config.hidden_size, wc.hidden_size);
    for (int l : {0, last}) expect_block_cut(w.layers[l], ww.layers[l], r, tp, "layers." + std::to_string(l));
    ASSERT_EQ(w.dspark.size(), ww.dspark.size());
    ASSERT_FALSE(w.dspark.empty());
    for (size_t st = 0; st < ww.dspark.size(); ++st)
      expect_block_cut(w.dspark[st], ww.dspark[st], r, tp, "mtp." + std::to_string(st));
    EXPECT_TRUE(same(w.dspark.back().markov_embed, ww.dspark.back().markov_embed));  // kept whole (rank_weights.h)
    EXPECT_TRUE(same(w.dspark.back().markov_head.weight, ww.dspark.back().markov_head.weight));
    EXPECT_TRUE(same(w.dspark[0].main_proj.weight, ww.dspark[0].main_proj.weight));
    // Head and embedding: vocabulary rows.
    const int64_t vl = wc.vocab_size / tp;
    ASSERT_EQ(w.head.out(), vl);
    EXPECT_TRUE(same_rows(w.head.weight, ww.head.weight, r * vl, vl));
    EXPECT_TRUE(same_rows(w.embed, ww.embed, r * vl, vl));
    // Views into the same stored bytes: a row cut reads nothing.
    EXPECT_EQ(w.embed.bytes(), ww.embed.bytes() + r * vl * wc.hidden_size * 2);
  }
}

INSTANTIATE_TEST_SUITE_P(Tp, RankWeightsTest, ::testing::Values(2, 4));

TEST(RankWeights, RefusesWhatItCannotCut) {
  const family::Config fc = tiny4();
  const family::TensorTable table = family::expected_tensors(fc);
  std::shared_ptr<const family::Model> w = whole_weights(fc);
  auto tpi = make_split_plan(fc, table, 2, ExpertSplit::tp_intermediate);
  ASSERT_TRUE(tpi.ok());
  Status s = rank_model(*w, *tpi, 0).status();
  EXPECT_EQ(s.code(), StatusCode::unimplemented) << s.to_string();
  auto plan = make_split_plan(fc, table, 2, ExpertSplit::expert_parallel);
  ASSERT_TRUE(plan.ok());
  s = rank_model(*w, *plan, 2).status();
  EXPECT_EQ(s.code(), StatusCode::invalid_argument) << s.to_string();
  // A plan for another shape: its wq_b extent differs from the weights'; the error names the tensor.
  family::Config other = fc;
  other.num_attention_heads = 8;
  other.o_groups = 8;
  auto wrong = make_split_plan(other, family::expected_tensors(other), 2, ExpertSplit::expert_parallel);
  ASSERT_TRUE(wrong.ok()) << wrong.status().to_string();
  s = rank_model(*w, *wrong, 0).status();
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("layers.0.attn.wq_b.weight"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace dsv4::fabric
