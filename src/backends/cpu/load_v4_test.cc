// Opening a synthetic 0731 tiny checkpoint written by the family's writer: hash tables, position
// biases and hc_head read as the stored values, and the loaded model keeps pieces == whole.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backends/cpu/forward.h"
#include "family/deepseek_v41/layer_plan.h"
#include "backends/cpu/stored.h"
#include "backends/cpu/oracle_testing.h"
#include "core/checkpoint.h"
#include "family/deepseek_v41/model.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/synth.h"

namespace dsv4::cpu {
namespace {

const std::string& tiny_v4_dir() {
  static const std::string dir = oracle_testing::write_tiny_checkpoint("cpu_load_test_tiny_v4", family::Variant::v4, 5);
  return dir;
}

float f32_at(const TensorView& v, int64_t i) {
  float f;
  std::memcpy(&f, v.bytes() + 4 * i, 4);
  return f;
}

TEST(OracleLoadV4, BoundTensorsAreTheStoredValues) {
  auto w = family::open_model(tiny_v4_dir());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const family::Model& m = **w;
  auto ck = Checkpoint::open(tiny_v4_dir());
  ASSERT_TRUE(ck.ok());
  const family::ModelPlan c = family::build_plan(m.config);
  EXPECT_EQ(c.premix, family::HcPremix::own);
  EXPECT_EQ(c.window_format, KvRowFormat::model1);
  EXPECT_EQ(c.weight_block, 128);
  EXPECT_EQ(c.act_block, 128);
  EXPECT_EQ(m.config.num_hash_layers, 3);
  EXPECT_EQ(c.dspark_stages, 0);  // the 0731 drafter is checked, not run by the oracle
  auto o = Oracle::create(*w, OracleOptions{});
  ASSERT_TRUE(o.ok());
  EXPECT_FALSE((*o)->has_drafter());
  // tid2eid (I64) of layer 1, token 1000, slot 1.
  auto t = ck->tensor("layers.1.ffn.gate.tid2eid");
  ASSERT_TRUE(t.ok());
  int64_t e, bound;
  std::memcpy(&e, t->bytes() + 8 * (1000 * t->dim(1) + 1), 8);
  const family::LayerWeights& L1 = m.weights.layers[1];
  std::memcpy(&bound, L1.tid2eid.bytes() + 8 * (1000 * m.plan.layers[1].num_experts_per_tok + 1), 8);
  EXPECT_EQ(bound, e);
  EXPECT_FALSE(family::present(L1.gate_bias));
  EXPECT_TRUE(family::present(m.weights.layers[3].gate_bias));
  // Position biases of the ratio-4 layer 2 (main [4, 256] and indexer [4, 256]) and ratio-16 layer 3.
  for (const auto& [name, view] : {std::pair{"layers.2.attn.compressor.ape", &m.weights.layers[2].compressor_ape},
                                   std::pair{"layers.2.attn.indexer.compressor.ape",
                                             &m.weights.layers[2].indexer_compressor_ape},
                                   std::pair{"layers.3.attn.compressor.ape", &m.weights.layers[3].compressor_ape}}) {
    auto a = ck->tensor(name);
    ASSERT_TRUE(a.ok()) << name;
    const Vec vec = floats(*view);
    ASSERT_EQ(static_cast<int64_t>(vec.size()), a->numel()) << name;
    EXPECT_EQ(vec[a->numel() - 3], f32_at(*a, a->numel() - 3)) << name;
  }
  EXPECT_EQ(m.weights.layers[2].compressor_wkv.out(), 2 * m.config.head_dim);  // overlapped: 2x wide
  EXPECT_EQ(m.weights.layers[3].compressor_wkv.out(), m.config.head_dim);
  auto s = ck->tensor("hc_head_scale");
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(family::present(m.weights.hc_head_scale));
  EXPECT_EQ(floats(m.weights.hc_head_scale)[0], f32_at(*s, 0));
}

TEST(OracleLoadV4, LoadedTinyModelPiecesEqualWhole) {
  auto w = family::open_model(tiny_v4_dir());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  OracleOptions o;
  o.threads = 2;
  auto oracle = std::move(Oracle::create(*w, o)).value();
  std::vector<int32_t> t(35);
  for (int i = 0; i < 35; ++i) t[i] = (i * 104729 + 7) % 129280;
  const auto whole = oracle_testing::run_pieces(*oracle, t, {35});
  ASSERT_EQ(whole.size(), static_cast<size_t>(35) * 129280);
  for (float v : whole) ASSERT_TRUE(std::isfinite(v));
  EXPECT_EQ(oracle_testing::run_pieces(*oracle, t, {6, 11, 1, 17}), whole);
}

}  // namespace
}  // namespace dsv4::cpu
