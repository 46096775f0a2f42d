// A rank's slice of the decoded weights (rank_weights.h) at TP 2 and 4 on a tiny V4.1 shape with the DSpark
// drafter: the ranks' slices put side by side give back every cut tensor of the whole model element for element
// (values read from the whole model by index arithmetic) in the layers and the drafter's stages alike, each
// routed expert is held whole by exactly its owner, wo_b and the shared expert stay whole, the head and the
// embedding hold the rank's vocabulary rows, the Markov head stays whole, the rank config names the per-rank
// head and group counts, and mismatched plans are refused by name.
#include <gtest/gtest.h>

#include <string>

#include "backends/cpu/load.h"
#include "backends/cpu/synthetic.h"
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

std::shared_ptr<cpu::ModelWeights> whole_weights(const family::Config& c) {
  return cpu::synthetic_weights(cpu::model_config_from(c), 7, true);
}

// Element (n, k) of a row-major [out, in] matrix.
float at(const std::vector<float>& m, int64_t in, int64_t n, int64_t k) { return m[static_cast<size_t>(n * in + k)]; }

// One block's cut (a layer or a DSpark stage) on rank r of tp against the whole block.
void expect_block_cut(const cpu::BlockWeights& got, const cpu::BlockWeights& want, int32_t r, int32_t tp,
                      const std::string& name) {
  SCOPED_TRACE(name);
  const cpu::AttentionWeights& A = got.attn;
  const cpu::AttentionWeights& W = want.attn;
  // wq_b: rows of heads [r*H/tp, (r+1)*H/tp), each head_dim rows; scale rows per 32.
  const int64_t qrows = W.wq_b.out / tp;
  ASSERT_EQ(A.wq_b.out, qrows);
  ASSERT_EQ(A.wq_b.in, W.wq_b.in);
  for (int64_t n = 0; n < qrows; ++n)
    for (int64_t k = 0; k < W.wq_b.in; ++k)
      ASSERT_EQ(A.wq_b.at(n, k), W.wq_b.at(r * qrows + n, k)) << "wq_b " << name << " rank " << r;
  ASSERT_EQ(A.sink.size(), W.sink.size() / tp);
  for (size_t h = 0; h < A.sink.size(); ++h) EXPECT_EQ(A.sink[h], W.sink[r * A.sink.size() + h]);
  // wo_a: the rank's group rows; wo_b reads every rank's groups and stays whole.
  const int64_t grows = W.wo_a.out / tp;
  ASSERT_EQ(A.wo_a.out, grows);
  ASSERT_EQ(A.wo_a.in, W.wo_a.in);
  for (int64_t n = 0; n < grows; ++n)
    for (int64_t k = 0; k < W.wo_a.in; ++k)
      ASSERT_EQ(at(A.wo_a.w, A.wo_a.in, n, k), at(W.wo_a.w, W.wo_a.in, r * grows + n, k));
  EXPECT_EQ(A.wo_b.w, W.wo_b.w);
  EXPECT_EQ(A.wo_b.scale, W.wo_b.scale);
  // Replicated attention weights are untouched.
  EXPECT_EQ(A.wkv.w, W.wkv.w);
  EXPECT_EQ(A.wq_a.w, W.wq_a.w);
  // Routed experts: expert e whole on rank e / (E / tp), empty (0 x 0) elsewhere; ids stay global.
  const cpu::MoeWeights& M = got.ffn;
  const cpu::MoeWeights& X = want.ffn;
  ASSERT_EQ(M.experts.size(), X.experts.size());
  const size_t per = X.experts.size() / static_cast<size_t>(tp);
  for (size_t e = 0; e < X.experts.size(); ++e) {
    const bool mine = e / per == static_cast<size_t>(r);
    for (auto [a, b] : {std::pair{&M.experts[e].w1, &X.experts[e].w1}, std::pair{&M.experts[e].w2, &X.experts[e].w2},
                        std::pair{&M.experts[e].w3, &X.experts[e].w3}}) {
      if (mine) {
        EXPECT_EQ(a->out, b->out);
        EXPECT_EQ(a->in, b->in);
        EXPECT_EQ(a->w, b->w);
        EXPECT_EQ(a->scale, b->scale);
      } else {
        EXPECT_EQ(a->out, 0);
        EXPECT_EQ(a->in, 0);
        EXPECT_TRUE(a->w.empty() && a->scale.empty());
      }
    }
  }
  // Shared expert: whole.
  EXPECT_EQ(M.shared.w1.w, X.shared.w1.w);
  EXPECT_EQ(M.shared.w2.w, X.shared.w2.w);
  EXPECT_EQ(M.shared.w3.scale, X.shared.w3.scale);
  EXPECT_EQ(M.gate.w, X.gate.w);  // the router is replicated
}

class RankWeightsTest : public ::testing::TestWithParam<int32_t> {};

TEST_P(RankWeightsTest, RanksTogetherGiveBackTheWholeModel) {
  const int32_t tp = GetParam();
  const family::Config fc = tiny4();
  auto plan = make_split_plan(fc, family::expected_tensors(fc), tp, ExpertSplit::expert_parallel);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  std::shared_ptr<const cpu::ModelWeights> whole = whole_weights(fc);
  const cpu::ModelConfig& wc = whole->config;
  const int last = wc.n_layers - 1;
  for (int32_t r = 0; r < tp; ++r) {
    std::shared_ptr<cpu::ModelWeights> w = whole_weights(fc);
    ASSERT_TRUE(slice_weights_for_rank(*w, *plan, r).ok());
    EXPECT_EQ(w->config.n_heads, 4 / tp);
    EXPECT_EQ(w->config.o_groups, 4 / tp);
    EXPECT_EQ(w->config.moe_inter, wc.moe_inter);
    EXPECT_EQ(w->config.vocab, wc.vocab);
    EXPECT_EQ(w->config.dim, wc.dim);
    for (int l : {0, last}) expect_block_cut(w->layers[l], whole->layers[l], r, tp, "layers." + std::to_string(l));
    ASSERT_TRUE(w->dspark && whole->dspark);
    ASSERT_EQ(w->dspark->stages.size(), whole->dspark->stages.size());
    for (size_t st = 0; st < whole->dspark->stages.size(); ++st)
      expect_block_cut(w->dspark->stages[st], whole->dspark->stages[st], r, tp, "mtp." + std::to_string(st));
    EXPECT_EQ(w->dspark->markov_embed, whole->dspark->markov_embed);  // kept whole (rank_weights.h)
    EXPECT_EQ(w->dspark->markov_head.w, whole->dspark->markov_head.w);
    EXPECT_EQ(w->dspark->main_proj.w, whole->dspark->main_proj.w);
    // Head: vocabulary rows.
    const int64_t vl = wc.vocab / tp;
    ASSERT_EQ(w->head.out, vl);
    for (int64_t n : {int64_t{0}, vl / 2, vl - 1})
      for (int64_t k = 0; k < w->head.in; ++k) ASSERT_EQ(at(w->head.w, w->head.in, n, k), at(whole->head.w, whole->head.in, r * vl + n, k));
    // Embedding: vocabulary rows, bf16 [V / tp, D].
    const int64_t D = wc.dim;
    ASSERT_EQ(static_cast<int64_t>(w->embed.size()), vl * D);
    for (int64_t n = 0; n < vl; ++n)
      for (int64_t k = 0; k < D; ++k)
        ASSERT_EQ(w->embed[static_cast<size_t>(n * D + k)], whole->embed[static_cast<size_t>((r * vl + n) * D + k)]);
  }
}

INSTANTIATE_TEST_SUITE_P(Tp, RankWeightsTest, ::testing::Values(2, 4));

TEST(RankWeights, RefusesWhatItCannotCut) {
  const family::Config fc = tiny4();
  const family::TensorTable table = family::expected_tensors(fc);
  std::shared_ptr<cpu::ModelWeights> w = whole_weights(fc);
  auto tpi = make_split_plan(fc, table, 2, ExpertSplit::tp_intermediate);
  ASSERT_TRUE(tpi.ok());
  Status s = slice_weights_for_rank(*w, *tpi, 0);
  EXPECT_EQ(s.code(), StatusCode::unimplemented) << s.to_string();
  auto plan = make_split_plan(fc, table, 2, ExpertSplit::expert_parallel);
  ASSERT_TRUE(plan.ok());
  s = slice_weights_for_rank(*w, *plan, 2);
  EXPECT_EQ(s.code(), StatusCode::invalid_argument) << s.to_string();
  // A plan for another shape: its wq_b extent differs from the weights'; the error names the tensor.
  family::Config other = fc;
  other.num_attention_heads = 8;
  other.o_groups = 8;
  auto wrong = make_split_plan(other, family::expected_tensors(other), 2, ExpertSplit::expert_parallel);
  ASSERT_TRUE(wrong.ok()) << wrong.status().to_string();
  s = slice_weights_for_rank(*w, *wrong, 0);
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("layers.0.attn.wq_b.weight"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace dsv4::fabric
