// An EXL3 pack cut for tensor-parallel ranks (rank_weights.h, exl3_cut.h) at TP 2 and 4, on the tiny V4.1
// shape with 4 heads in 4 output groups and the drafter, every linear of the Mia layout EXL3-coded
// (family::reencode_as_exl3, as a loaded pack holds it): each rank holds the expected shapes (wq_b and wo_a cut
// along EXL3's out, the head cut at TP 2 and whole at TP 4, where its vocabulary slices are not on
// 128-column blocks; each routed expert whole on its owner and empty elsewhere; replicated linears shared);
// the ranks' slices of every wq_b, wo_a and head side by side give back the whole linear's stored words and
// decoded values exactly; the oracle's EXL3 matmul on a rank's slice equals the same columns of the whole
// linear's bit for bit (float and double accumulation, bf16 and unrounded outputs); and cuts off the output
// Hadamard's 128-column blocks are refused by name.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/exl3_linear.h"
#include "fabric/exl3_cut.h"
#include "fabric/rank_weights.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/synthetic_exl3.h"
#include "family/deepseek_v41/synthetic_weights.h"
#include "family/deepseek_v41/tensors.h"

namespace dsv4::fabric {
namespace {

// The tiny V4.1 shape with 4 output groups (rank_weights_test.cc): TP 4 gives each rank one head (128 wq_b
// columns, one 128-column block) and one wo_a group (one EXL3 part).
family::Config tiny4() {
  family::Config c = family::preset_config(family::Preset::tiny, family::Variant::v41);
  c.o_groups = 4;
  return c;
}

// The whole model, EXL3-coded once (with the drafter, so the DSpark stages are cut too); ranks cut views of it.
const family::Model& whole() {
  static const std::shared_ptr<const family::Model> w = [] {
    const family::Config c = tiny4();
    auto m = family::reencode_as_exl3(c, *family::synthetic_weights(c, 7, true), 7);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    return *m;
  }();
  return *w;
}

// Rank r's cut of the whole model.
std::shared_ptr<const family::Model> cut(int32_t tp, int32_t r) {
  const family::Config fc = tiny4();
  auto plan = make_split_plan(fc, family::expected_tensors(fc), tp, ExpertSplit::expert_parallel);
  EXPECT_TRUE(plan.ok()) << plan.status().to_string();
  auto m = rank_model(whole(), *plan, r);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return *m;
}

// The blocks of a model (layers, then DSpark stages) with their names.
std::vector<std::pair<std::string, const family::LayerWeights*>> blocks(const family::Model& m) {
  std::vector<std::pair<std::string, const family::LayerWeights*>> b;
  const family::ModelWeights& w = m.weights;
  for (size_t l = 0; l < w.layers.size(); ++l) b.emplace_back("layers." + std::to_string(l), &w.layers[l]);
  for (size_t s = 0; s < w.dspark.size(); ++s) b.emplace_back("mtp." + std::to_string(s), &w.dspark[s]);
  return b;
}

// One stored trellis row of tiles: kt's tiles [0, out/16), 16·bits words each.
std::vector<uint16_t> trellis_row(const exl3::Linear& L, int64_t kt) {
  const int64_t n = L.out_features / 16 * 16 * L.bits;
  std::vector<uint16_t> row(static_cast<size_t>(n));
  L.trellis.copy(kt * n, n, row.data());
  return row;
}

void expect_same_part(const family::Exl3Part& a, const family::Exl3Part& b) {
  EXPECT_EQ(a.in, b.in);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.in_padded, b.in_padded);
  EXPECT_EQ(a.out_padded, b.out_padded);
  EXPECT_EQ(a.k_split_out, b.k_split_out);
  EXPECT_EQ(a.packed.bias, b.packed.bias);
  EXPECT_EQ(a.packed.trellis, b.packed.trellis);
  EXPECT_EQ(a.packed.suh, b.packed.suh);
  EXPECT_EQ(a.packed.svh, b.packed.svh);
  EXPECT_EQ(a.packed.bits, b.packed.bits);
  EXPECT_EQ(a.packed.codebook, b.packed.codebook);
}

// The ranks' slices of `whole` side by side (rank order = output order) give back its parts exactly: a
// block-diagonal linear's parts in order; one part's columns joined back (trellis rows, svh, Wq, bias), its
// inputs (suh) on every rank.
void expect_joined(const family::Exl3Linear& whole, const std::vector<const family::Exl3Linear*>& ranks,
                   const std::string& name) {
  SCOPED_TRACE(name);
  int64_t out = 0;
  for (const family::Exl3Linear* r : ranks) out += r->out;
  EXPECT_EQ(out, whole.out);
  if (whole.parts.size() > 1) {
    std::vector<const family::Exl3Part*> joined;
    for (const family::Exl3Linear* r : ranks)
      for (const family::Exl3Part& p : r->parts) joined.push_back(&p);
    ASSERT_EQ(joined.size(), whole.parts.size());
    for (size_t g = 0; g < joined.size(); ++g) expect_same_part(*joined[g], whole.parts[g]);
    return;
  }
  const family::Exl3Part& W = whole.parts[0];
  std::vector<uint16_t> trellis, svh, bias16;
  for (int64_t kt = 0; kt < W.in_padded / 16; ++kt)
    for (const family::Exl3Linear* r : ranks) {
      const std::vector<uint16_t> row = trellis_row(r->parts.at(0).packed, kt);
      trellis.insert(trellis.end(), row.begin(), row.end());
    }
  for (const family::Exl3Linear* r : ranks) {
    ASSERT_EQ(r->parts.size(), 1u);
    const family::Exl3Part& P = r->parts[0];
    EXPECT_EQ(P.in, W.in);
    EXPECT_EQ(P.in_padded, W.in_padded);
    EXPECT_EQ(P.packed.suh, W.packed.suh);
    EXPECT_EQ(P.packed.bits, W.packed.bits);
    EXPECT_EQ(P.packed.codebook, W.packed.codebook);
    EXPECT_EQ(P.packed.in_features, W.packed.in_features);
    EXPECT_EQ(P.packed.out_features, P.out_padded);
    EXPECT_EQ(P.k_split_out, W.out_padded);  // the device's K split follows the whole part
    EXPECT_TRUE(exl3::validate(P.packed).ok());
    svh.insert(svh.end(), P.packed.svh.begin(), P.packed.svh.end());
    bias16.insert(bias16.end(), P.packed.bias.begin(), P.packed.bias.end());
  }
  EXPECT_EQ(trellis, W.packed.trellis.to_vector());
  EXPECT_EQ(svh, W.packed.svh);
  EXPECT_EQ(bias16, W.packed.bias);
}

class RankWeightsExl3Test : public ::testing::TestWithParam<int32_t> {};

TEST_P(RankWeightsExl3Test, EachRankHoldsItsShapes) {
  const int32_t tp = GetParam();
  const family::Model& W = whole();
  const family::Config& wc = W.config;
  const family::ModelWeights& WW = W.weights;
  ASSERT_TRUE(WW.head.exl3 && WW.layers[0].wq_b.exl3 && WW.layers[0].wo_a.exl3 && WW.layers[0].experts[0].w1.exl3);
  for (int32_t r = 0; r < tp; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + " of " + std::to_string(tp));
    std::shared_ptr<const family::Model> m = cut(tp, r);
    const family::ModelWeights& w = m->weights;
    EXPECT_EQ(m->config.num_attention_heads, wc.num_attention_heads / tp);
    EXPECT_EQ(m->config.o_groups, wc.o_groups / tp);
    const auto got = blocks(*m), want = blocks(W);
    ASSERT_EQ(got.size(), want.size());
    for (size_t b = 0; b < got.size(); ++b) {
      SCOPED_TRACE(got[b].first);
      const family::LayerWeights& A = *got[b].second;
      const family::LayerWeights& X = *want[b].second;
      // wq_b: the rank's heads = EXL3 columns [r, r + 1) x out / tp, one part, every input.
      ASSERT_TRUE(A.wq_b.exl3);
      EXPECT_EQ(A.wq_b.out(), X.wq_b.out() / tp);
      EXPECT_EQ(A.wq_b.in(), X.wq_b.in());
      ASSERT_EQ(A.wq_b.exl3->parts.size(), 1u);
      const family::Exl3Part& q = A.wq_b.exl3->parts[0];
      EXPECT_EQ(q.out, X.wq_b.out() / tp);
      EXPECT_EQ(q.out_padded, q.out);
      EXPECT_EQ(q.packed.out_features, q.out);
      EXPECT_EQ(static_cast<int64_t>(q.packed.trellis.size()), q.in_padded / 16 * (q.out / 16) * 16 * q.packed.bits);
      EXPECT_EQ(static_cast<int64_t>(q.packed.svh.size()), q.out);
      EXPECT_EQ(static_cast<int64_t>(q.packed.suh.size()), q.in_padded);
      EXPECT_EQ(q.k_split_out, X.wq_b.exl3->parts[0].out_padded);
      EXPECT_EQ(A.attn_sink.dim(0), X.attn_sink.dim(0) / tp);
      // wo_a: the rank's groups, whole parts with their inputs (the rank's heads).
      ASSERT_TRUE(A.wo_a.exl3);
      EXPECT_EQ(A.wo_a.out(), X.wo_a.out() / tp);
      EXPECT_EQ(A.wo_a.in(), X.wo_a.in() / tp);
      ASSERT_EQ(A.wo_a.exl3->parts.size(), X.wo_a.exl3->parts.size() / tp);
      for (const family::Exl3Part& p : A.wo_a.exl3->parts) EXPECT_EQ(p.k_split_out, 0);
      // Replicated: the very same linears.
      EXPECT_EQ(A.wq_a.exl3, X.wq_a.exl3);
      EXPECT_EQ(A.wkv.exl3, X.wkv.exl3);
      EXPECT_EQ(A.wo_b.exl3, X.wo_b.exl3);
      const family::LayerWeights& M = A;
      const family::LayerWeights& N = X;
      EXPECT_EQ(M.shared_w1.exl3, N.shared_w1.exl3);
      EXPECT_EQ(M.shared_w2.exl3, N.shared_w2.exl3);
      // Routed experts: whole on the owner (the same linears), empty elsewhere.
      ASSERT_EQ(M.experts.size(), N.experts.size());
      const size_t per = N.experts.size() / static_cast<size_t>(tp);
      for (size_t e = 0; e < N.experts.size(); ++e) {
        const bool mine = e / per == static_cast<size_t>(r);
        for (auto [a, x] : {std::pair{&M.experts[e].w1, &N.experts[e].w1}, std::pair{&M.experts[e].w2, &N.experts[e].w2},
                            std::pair{&M.experts[e].w3, &N.experts[e].w3}}) {
          if (mine) {
            EXPECT_EQ(a->exl3, x->exl3);
            EXPECT_EQ(a->out(), x->out());
            EXPECT_EQ(a->in(), x->in());
          } else {
            EXPECT_FALSE(a->held());
            EXPECT_EQ(a->out(), 0);
            EXPECT_EQ(a->in(), 0);
          }
        }
      }
    }
    // The head: V / 2 = 505 blocks of 128 at TP 2, cut; at TP 4, 32,320 columns are not whole blocks: whole.
    ASSERT_TRUE(w.head.exl3);
    if (tp == 2) {
      EXPECT_EQ(w.head.out(), wc.vocab_size / 2);
    } else {
      EXPECT_EQ(w.head.out(), wc.vocab_size);
      EXPECT_EQ(w.head.exl3, WW.head.exl3);
    }
    EXPECT_EQ(w.head.in(), wc.hidden_size);
    EXPECT_EQ(w.embed.dim(0), wc.vocab_size / tp);  // native: cut at any TP
  }
}

TEST_P(RankWeightsExl3Test, SlicesSideBySideGiveBackTheWholeLinears) {
  const int32_t tp = GetParam();
  const family::Model& W = whole();
  std::vector<std::shared_ptr<const family::Model>> ranks;
  for (int32_t r = 0; r < tp; ++r) ranks.push_back(cut(tp, r));
  const auto want = blocks(W);
  for (size_t b = 0; b < want.size(); ++b) {
    std::vector<const family::Exl3Linear*> q, o;
    for (const auto& m : ranks) {
      q.push_back(blocks(*m)[b].second->wq_b.exl3.get());
      o.push_back(blocks(*m)[b].second->wo_a.exl3.get());
    }
    expect_joined(*want[b].second->wq_b.exl3, q, want[b].first + ".attn.wq_b");
    expect_joined(*want[b].second->wo_a.exl3, o, want[b].first + ".attn.wo_a");
  }
  if (tp == 2) {
    std::vector<const family::Exl3Linear*> h;
    for (const auto& m : ranks) h.push_back(m->weights.head.exl3.get());
    expect_joined(*W.weights.head.exl3, h, "head");
  }
}

// Rows of bf16 values (the activations between ops).
std::vector<float> activations(int64_t rows, int64_t in, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * in));
  for (float& v : x) v = cpu::round_bf16(d(g));
  return x;
}

// The oracle's EXL3 matmul (Acc accumulation, bf16 or unrounded outputs) of rank slice `part` of `whole`,
// its outputs starting at whole column b, on its inputs (a block-diagonal linear's rank reads the inputs
// of its parts), equals columns [b, b + part.out) of the whole matmul bit for bit.
template <typename Acc>
void expect_columns_equal(const family::Exl3Linear& whole, const family::Exl3Linear& part, int64_t b,
                          const std::string& name) {
  SCOPED_TRACE(name);
  ThreadPool pool(2);
  constexpr int64_t rows = 3;
  int64_t x0 = 0, y0 = 0;  // the rank's first input: the inputs of the whole's parts before its outputs
  for (size_t g = 0; g < whole.parts.size() && y0 < b && whole.parts.size() > 1; ++g) {
    x0 += whole.parts[g].in;
    y0 += whole.parts[g].out;
  }
  const std::vector<float> x = activations(rows, whole.in, 11);
  std::vector<float> xr(static_cast<size_t>(rows * part.in));
  for (int64_t r = 0; r < rows; ++r)
    std::copy(x.begin() + r * whole.in + x0, x.begin() + r * whole.in + x0 + part.in, xr.begin() + r * part.in);
  std::vector<float> yw(rows * whole.out), yr(rows * part.out);
  cpu::exl3_linear_bf16<Acc>(pool, x.data(), rows, whole, yw.data());
  cpu::exl3_linear_bf16<Acc>(pool, xr.data(), rows, part, yr.data());
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_EQ(std::memcmp(&yr[r * part.out], &yw[r * whole.out + b], part.out * sizeof(float)), 0) << "bf16 row " << r;
  std::vector<Acc> xa(x.begin(), x.end()), xra(xr.begin(), xr.end()), ywa(rows * whole.out), yra(rows * part.out);
  cpu::exl3_linear_acc<Acc>(pool, xa.data(), rows, whole, ywa.data());
  cpu::exl3_linear_acc<Acc>(pool, xra.data(), rows, part, yra.data());
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_EQ(std::memcmp(&yra[r * part.out], &ywa[r * whole.out + b], part.out * sizeof(Acc)), 0) << "unrounded row " << r;
}

TEST_P(RankWeightsExl3Test, RankMatmulEqualsTheWholeColumnsBitForBit) {
  const int32_t tp = GetParam();
  const family::Model& W = whole();
  const auto want = blocks(W);
  for (int32_t r = 0; r < tp; ++r) {
    std::shared_ptr<const family::Model> m = cut(tp, r);
    const auto got = blocks(*m);
    for (size_t b : {size_t{0}, W.weights.layers.size() - 1, want.size() - 1}) {
      const std::string n = want[b].first + " rank " + std::to_string(r);
      const family::LayerWeights& A = *got[b].second;
      const family::LayerWeights& X = *want[b].second;
      expect_columns_equal<float>(*X.wq_b.exl3, *A.wq_b.exl3, r * A.wq_b.out(), n + " wq_b");
      expect_columns_equal<double>(*X.wq_b.exl3, *A.wq_b.exl3, r * A.wq_b.out(), n + " wq_b");
      expect_columns_equal<float>(*X.wo_a.exl3, *A.wo_a.exl3, r * A.wo_a.out(), n + " wo_a");
      expect_columns_equal<double>(*X.wo_a.exl3, *A.wo_a.exl3, r * A.wo_a.out(), n + " wo_a");
    }
    if (tp == 2) {
      const family::Matrix& h = m->weights.head;
      expect_columns_equal<float>(*W.weights.head.exl3, *h.exl3, r * h.out(), "head rank " + std::to_string(r));
      expect_columns_equal<double>(*W.weights.head.exl3, *h.exl3, r * h.out(), "head rank " + std::to_string(r));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tp, RankWeightsExl3Test, ::testing::Values(2, 4));

TEST(RankWeightsExl3, RefusesCutsOffTheHadamardBlocks) {
  const family::Model& W = whole();
  const family::Exl3Linear& q = *W.weights.layers[0].wq_b.exl3;  // one part [128, 512]
  const family::Exl3Linear& o = *W.weights.layers[0].wo_a.exl3;  // 4 parts of 64 outputs (padded to 128)
  const exl3::Linear& L = q.parts[0].packed;
  auto all = exl3_columns(L, 0, L.out_features);
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  EXPECT_TRUE(all->trellis == L.trellis);
  EXPECT_EQ(all->svh, L.svh);
  for (auto [b, e] : {std::pair<int64_t, int64_t>{64, 192}, {0, 64}, {0, 0}, {128, 640}}) {
    auto c = exl3_columns(L, b, e);
    EXPECT_EQ(c.status().code(), StatusCode::invalid_argument) << b << ", " << e;
    EXPECT_NE(c.status().message().find(L.name), std::string::npos) << c.status().message();
  }
  Status s = exl3_check_cut(q, 0, 192, "layers.0.attn.wq_b");
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("layers.0.attn.wq_b"), std::string::npos) << s.message();
  EXPECT_TRUE(exl3_check_cut(q, 128, 384, "wq_b").ok());
  s = exl3_check_cut(o, 0, 32, "layers.0.attn.wo_a");  // inside the first of several block-diagonal parts
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("layers.0.attn.wo_a"), std::string::npos) << s.message();
  EXPECT_TRUE(exl3_check_cut(o, 64, 192, "wo_a").ok());  // parts 1 and 2, whole
  // A plan whose wq_b cut is off the blocks (rank 0 takes 64 columns): refused by the tensor's name.
  const family::Config fc = tiny4();
  auto plan = make_split_plan(fc, family::expected_tensors(fc), 2, ExpertSplit::expert_parallel);
  ASSERT_TRUE(plan.ok());
  for (TensorSplit& t : plan->tensors)
    if (t.name == "layers.0.attn.wq_b.weight") t.ranks[0].end = t.ranks[1].begin = 64;
  s = rank_model(W, *plan, 0).status();
  EXPECT_EQ(s.code(), StatusCode::invalid_argument) << s.to_string();
  EXPECT_NE(s.message().find("layers.0.attn.wq_b"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace dsv4::fabric
