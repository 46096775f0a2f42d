// An EXL3 pack cut for tensor-parallel ranks (rank_weights.h, exl3_cut.h) at TP 2 and 4, on the tiny V4.1
// shape with 4 heads in 4 output groups and the drafter, every linear of the Mia layout EXL3-coded
// (cpu::reencode_as_exl3, as a loaded pack holds it): each rank holds the expected shapes (wq_b and wo_a cut
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

#include "backends/cpu/load.h"
#include "backends/cpu/synthetic.h"
#include "backends/cpu/synthetic_exl3.h"
#include "backends/cpu/weights_copy.h"
#include "fabric/exl3_cut.h"
#include "fabric/rank_weights.h"
#include "family/deepseek_v41/preset.h"
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

// The whole model, EXL3-coded once (with the drafter, so the DSpark stages are cut too); ranks cut copies.
const cpu::ModelWeights& whole() {
  static const std::shared_ptr<cpu::ModelWeights> w = [] {
    const family::Config c = tiny4();
    std::shared_ptr<cpu::ModelWeights> m = cpu::synthetic_weights(cpu::model_config_from(c), 7, true);
    const Status s = cpu::reencode_as_exl3(c, *m, 7);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return m;
  }();
  return *w;
}

// Rank r's cut of a copy of the whole model.
std::shared_ptr<cpu::ModelWeights> rank_model(int32_t tp, int32_t r) {
  const family::Config fc = tiny4();
  auto plan = make_split_plan(fc, family::expected_tensors(fc), tp, ExpertSplit::expert_parallel);
  EXPECT_TRUE(plan.ok()) << plan.status().to_string();
  std::shared_ptr<cpu::ModelWeights> w = cpu::copy_sharing_exl3(whole());
  const Status s = slice_weights_for_rank(*w, *plan, r);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return w;
}

// The blocks of a model (layers, then DSpark stages) with their names.
std::vector<std::pair<std::string, const cpu::BlockWeights*>> blocks(const cpu::ModelWeights& w) {
  std::vector<std::pair<std::string, const cpu::BlockWeights*>> b;
  for (size_t l = 0; l < w.layers.size(); ++l) b.emplace_back("layers." + std::to_string(l), &w.layers[l]);
  for (size_t s = 0; w.dspark && s < w.dspark->stages.size(); ++s)
    b.emplace_back("mtp." + std::to_string(s), &w.dspark->stages[s]);
  return b;
}

// One stored trellis row of tiles: kt's tiles [0, out/16), 16·bits words each.
std::vector<uint16_t> trellis_row(const exl3::Linear& L, int64_t kt) {
  const int64_t n = L.out_features / 16 * 16 * L.bits;
  return std::vector<uint16_t>(L.trellis.begin() + kt * n, L.trellis.begin() + (kt + 1) * n);
}

void expect_same_part(const cpu::Exl3Part& a, const cpu::Exl3Part& b) {
  EXPECT_EQ(a.in, b.in);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.in_padded, b.in_padded);
  EXPECT_EQ(a.out_padded, b.out_padded);
  EXPECT_EQ(a.wq_t, b.wq_t);
  EXPECT_EQ(a.suh, b.suh);
  EXPECT_EQ(a.svh, b.svh);
  EXPECT_EQ(a.bias, b.bias);
  EXPECT_EQ(a.k_split_out, b.k_split_out);
  EXPECT_EQ(a.packed.trellis, b.packed.trellis);
  EXPECT_EQ(a.packed.suh, b.packed.suh);
  EXPECT_EQ(a.packed.svh, b.packed.svh);
  EXPECT_EQ(a.packed.bits, b.packed.bits);
  EXPECT_EQ(a.packed.codebook, b.packed.codebook);
}

// The ranks' slices of `whole` side by side (rank order = output order) give back its parts exactly: a
// block-diagonal linear's parts in order; one part's columns joined back (trellis rows, svh, Wq, bias), its
// inputs (suh) on every rank.
void expect_joined(const cpu::Exl3Weight& whole, const std::vector<const cpu::Exl3Weight*>& ranks,
                   const std::string& name) {
  SCOPED_TRACE(name);
  int64_t out = 0;
  for (const cpu::Exl3Weight* r : ranks) out += r->out;
  EXPECT_EQ(out, whole.out);
  if (whole.parts.size() > 1) {
    std::vector<const cpu::Exl3Part*> joined;
    for (const cpu::Exl3Weight* r : ranks)
      for (const cpu::Exl3Part& p : r->parts) joined.push_back(&p);
    ASSERT_EQ(joined.size(), whole.parts.size());
    for (size_t g = 0; g < joined.size(); ++g) expect_same_part(*joined[g], whole.parts[g]);
    return;
  }
  const cpu::Exl3Part& W = whole.parts[0];
  std::vector<uint16_t> trellis, svh, bias16;
  std::vector<float> wq_t, svh_f, bias;
  for (int64_t kt = 0; kt < W.in_padded / 16; ++kt)
    for (const cpu::Exl3Weight* r : ranks) {
      const std::vector<uint16_t> row = trellis_row(r->parts.at(0).packed, kt);
      trellis.insert(trellis.end(), row.begin(), row.end());
    }
  for (const cpu::Exl3Weight* r : ranks) {
    ASSERT_EQ(r->parts.size(), 1u);
    const cpu::Exl3Part& P = r->parts[0];
    EXPECT_EQ(P.in, W.in);
    EXPECT_EQ(P.in_padded, W.in_padded);
    EXPECT_EQ(P.suh, W.suh);
    EXPECT_EQ(P.packed.suh, W.packed.suh);
    EXPECT_EQ(P.packed.bits, W.packed.bits);
    EXPECT_EQ(P.packed.codebook, W.packed.codebook);
    EXPECT_EQ(P.packed.in_features, W.packed.in_features);
    EXPECT_EQ(P.packed.out_features, P.out_padded);
    EXPECT_EQ(P.k_split_out, W.out_padded);  // the device's K split follows the whole part
    EXPECT_TRUE(exl3::validate(P.packed).ok());
    wq_t.insert(wq_t.end(), P.wq_t.begin(), P.wq_t.end());
    svh_f.insert(svh_f.end(), P.svh.begin(), P.svh.end());
    svh.insert(svh.end(), P.packed.svh.begin(), P.packed.svh.end());
    bias.insert(bias.end(), P.bias.begin(), P.bias.end());
    bias16.insert(bias16.end(), P.packed.bias.begin(), P.packed.bias.end());
  }
  EXPECT_EQ(trellis, W.packed.trellis);
  EXPECT_EQ(svh, W.packed.svh);
  EXPECT_EQ(bias16, W.packed.bias);
  EXPECT_EQ(wq_t, W.wq_t);
  EXPECT_EQ(svh_f, W.svh);
  EXPECT_EQ(bias, W.bias);
}

class RankWeightsExl3Test : public ::testing::TestWithParam<int32_t> {};

TEST_P(RankWeightsExl3Test, EachRankHoldsItsShapes) {
  const int32_t tp = GetParam();
  const cpu::ModelWeights& W = whole();
  const cpu::ModelConfig& wc = W.config;
  ASSERT_TRUE(W.head.exl3 && W.layers[0].attn.wq_b.exl3 && W.layers[0].attn.wo_a.exl3 && W.layers[0].ffn.experts[0].w1.exl3);
  for (int32_t r = 0; r < tp; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + " of " + std::to_string(tp));
    std::shared_ptr<cpu::ModelWeights> w = rank_model(tp, r);
    EXPECT_EQ(w->config.n_heads, wc.n_heads / tp);
    EXPECT_EQ(w->config.o_groups, wc.o_groups / tp);
    const auto got = blocks(*w), want = blocks(W);
    ASSERT_EQ(got.size(), want.size());
    for (size_t b = 0; b < got.size(); ++b) {
      SCOPED_TRACE(got[b].first);
      const cpu::AttentionWeights& A = got[b].second->attn;
      const cpu::AttentionWeights& X = want[b].second->attn;
      // wq_b: the rank's heads = EXL3 columns [r, r + 1) x out / tp, one part, every input.
      ASSERT_TRUE(A.wq_b.exl3);
      EXPECT_EQ(A.wq_b.out, X.wq_b.out / tp);
      EXPECT_EQ(A.wq_b.in, X.wq_b.in);
      ASSERT_EQ(A.wq_b.exl3->parts.size(), 1u);
      const cpu::Exl3Part& q = A.wq_b.exl3->parts[0];
      EXPECT_EQ(q.out, X.wq_b.out / tp);
      EXPECT_EQ(q.out_padded, q.out);
      EXPECT_EQ(q.packed.out_features, q.out);
      EXPECT_EQ(static_cast<int64_t>(q.packed.trellis.size()), q.in_padded / 16 * (q.out / 16) * 16 * q.packed.bits);
      EXPECT_EQ(static_cast<int64_t>(q.packed.svh.size()), q.out);
      EXPECT_EQ(static_cast<int64_t>(q.packed.suh.size()), q.in_padded);
      EXPECT_EQ(q.k_split_out, X.wq_b.exl3->parts[0].out_padded);
      EXPECT_EQ(A.sink.size(), X.sink.size() / tp);
      // wo_a: the rank's groups, whole parts with their inputs (the rank's heads).
      ASSERT_TRUE(A.wo_a.exl3);
      EXPECT_EQ(A.wo_a.out, X.wo_a.out / tp);
      EXPECT_EQ(A.wo_a.in, X.wo_a.in / tp);
      ASSERT_EQ(A.wo_a.exl3->parts.size(), X.wo_a.exl3->parts.size() / tp);
      for (const cpu::Exl3Part& p : A.wo_a.exl3->parts) EXPECT_EQ(p.k_split_out, 0);
      EXPECT_EQ(A.wo_a.exl3->in, A.wo_a.in);
      EXPECT_EQ(A.wo_a.exl3->out, A.wo_a.out);
      // Replicated: the very same linears.
      EXPECT_EQ(A.wq_a.exl3, X.wq_a.exl3);
      EXPECT_EQ(A.wkv.exl3, X.wkv.exl3);
      EXPECT_EQ(A.wo_b.exl3, X.wo_b.exl3);
      const cpu::MoeWeights& M = got[b].second->ffn;
      const cpu::MoeWeights& N = want[b].second->ffn;
      EXPECT_EQ(M.shared.w1.exl3, N.shared.w1.exl3);
      EXPECT_EQ(M.shared.w2.exl3, N.shared.w2.exl3);
      // Routed experts: whole on the owner (the same linears), empty elsewhere.
      ASSERT_EQ(M.experts.size(), N.experts.size());
      const size_t per = N.experts.size() / static_cast<size_t>(tp);
      for (size_t e = 0; e < N.experts.size(); ++e) {
        const bool mine = e / per == static_cast<size_t>(r);
        for (auto [a, x] : {std::pair{&M.experts[e].w1, &N.experts[e].w1}, std::pair{&M.experts[e].w2, &N.experts[e].w2},
                            std::pair{&M.experts[e].w3, &N.experts[e].w3}}) {
          if (mine) {
            EXPECT_EQ(a->exl3, x->exl3);
            EXPECT_EQ(a->out, x->out);
            EXPECT_EQ(a->in, x->in);
          } else {
            EXPECT_FALSE(a->exl3);
            EXPECT_EQ(a->out, 0);
            EXPECT_EQ(a->in, 0);
          }
        }
      }
    }
    // The head: V / 2 = 505 blocks of 128 at TP 2, cut; at TP 4, 32,320 columns are not whole blocks: whole.
    ASSERT_TRUE(w->head.exl3);
    if (tp == 2) {
      EXPECT_EQ(w->head.out, wc.vocab / 2);
      EXPECT_EQ(w->head.exl3->out, wc.vocab / 2);
    } else {
      EXPECT_EQ(w->head.out, wc.vocab);
      EXPECT_EQ(w->head.exl3, W.head.exl3);
    }
    EXPECT_EQ(w->head.in, wc.dim);
    EXPECT_EQ(static_cast<int64_t>(w->embed.size()), wc.vocab / tp * wc.dim);  // native: cut at any TP
  }
}

TEST_P(RankWeightsExl3Test, SlicesSideBySideGiveBackTheWholeLinears) {
  const int32_t tp = GetParam();
  const cpu::ModelWeights& W = whole();
  std::vector<std::shared_ptr<cpu::ModelWeights>> ranks;
  for (int32_t r = 0; r < tp; ++r) ranks.push_back(rank_model(tp, r));
  const auto want = blocks(W);
  for (size_t b = 0; b < want.size(); ++b) {
    std::vector<const cpu::Exl3Weight*> q, o;
    for (const auto& m : ranks) {
      q.push_back(blocks(*m)[b].second->attn.wq_b.exl3.get());
      o.push_back(blocks(*m)[b].second->attn.wo_a.exl3.get());
    }
    expect_joined(*want[b].second->attn.wq_b.exl3, q, want[b].first + ".attn.wq_b");
    expect_joined(*want[b].second->attn.wo_a.exl3, o, want[b].first + ".attn.wo_a");
  }
  if (tp == 2) {
    std::vector<const cpu::Exl3Weight*> h;
    for (const auto& m : ranks) h.push_back(m->head.exl3.get());
    expect_joined(*W.head.exl3, h, "head");
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
void expect_columns_equal(const cpu::Exl3Weight& whole, const cpu::Exl3Weight& part, int64_t b, const std::string& name) {
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
  const cpu::ModelWeights& W = whole();
  const auto want = blocks(W);
  for (int32_t r = 0; r < tp; ++r) {
    std::shared_ptr<cpu::ModelWeights> m = rank_model(tp, r);
    const auto got = blocks(*m);
    for (size_t b : {size_t{0}, W.layers.size() - 1, want.size() - 1}) {
      const std::string n = want[b].first + " rank " + std::to_string(r);
      const cpu::AttentionWeights& A = got[b].second->attn;
      const cpu::AttentionWeights& X = want[b].second->attn;
      expect_columns_equal<float>(*X.wq_b.exl3, *A.wq_b.exl3, r * A.wq_b.out, n + " wq_b");
      expect_columns_equal<double>(*X.wq_b.exl3, *A.wq_b.exl3, r * A.wq_b.out, n + " wq_b");
      expect_columns_equal<float>(*X.wo_a.exl3, *A.wo_a.exl3, r * A.wo_a.out, n + " wo_a");
      expect_columns_equal<double>(*X.wo_a.exl3, *A.wo_a.exl3, r * A.wo_a.out, n + " wo_a");
    }
    if (tp == 2) {
      expect_columns_equal<float>(*W.head.exl3, *m->head.exl3, r * m->head.out, "head rank " + std::to_string(r));
      expect_columns_equal<double>(*W.head.exl3, *m->head.exl3, r * m->head.out, "head rank " + std::to_string(r));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tp, RankWeightsExl3Test, ::testing::Values(2, 4));

TEST(RankWeightsExl3, RefusesCutsOffTheHadamardBlocks) {
  const cpu::ModelWeights& W = whole();
  const cpu::Exl3Weight& q = *W.layers[0].attn.wq_b.exl3;  // one part [128, 512]
  const cpu::Exl3Weight& o = *W.layers[0].attn.wo_a.exl3;  // 4 parts of 64 outputs (padded to 128)
  const exl3::Linear& L = q.parts[0].packed;
  auto all = exl3_columns(L, 0, L.out_features);
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  EXPECT_EQ(all->trellis, L.trellis);
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
  std::shared_ptr<cpu::ModelWeights> w = cpu::copy_sharing_exl3(W);
  s = slice_weights_for_rank(*w, *plan, 0);
  EXPECT_EQ(s.code(), StatusCode::invalid_argument) << s.to_string();
  EXPECT_NE(s.message().find("layers.0.attn.wq_b"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace dsv4::fabric
