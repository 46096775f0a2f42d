// Loading a synthetic 0731 tiny checkpoint written by the family's writer: hash tables, position
// biases and hc_head decode to the stored values, and the loaded model keeps pieces == whole.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backends/cpu/forward.h"
#include "backends/cpu/load.h"
#include "backends/cpu/oracle_testing.h"
#include "core/checkpoint.h"
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

TEST(OracleLoadV4, DecodedTensorsEqualStoredValues) {
  auto w = load_weights(tiny_v4_dir());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const ModelWeights& m = **w;
  auto ck = Checkpoint::open(tiny_v4_dir());
  ASSERT_TRUE(ck.ok());
  EXPECT_TRUE(m.config.v4());
  EXPECT_EQ(m.config.weight_block, 128);
  EXPECT_EQ(m.config.act_block, 128);
  EXPECT_EQ(m.config.num_hash_layers, 3);
  EXPECT_EQ(m.dspark, nullptr);  // the 0731 drafter is not run by the oracle
  // tid2eid (I64) of layer 1, token 1000, slot 1.
  auto t = ck->tensor("layers.1.ffn.gate.tid2eid");
  ASSERT_TRUE(t.ok());
  int64_t e;
  std::memcpy(&e, t->bytes() + 8 * (1000 * t->dim(1) + 1), 8);
  EXPECT_EQ(m.layers[1].ffn.tid2eid[1000 * m.layers[1].ffn.n_active + 1], e);
  EXPECT_TRUE(m.layers[1].ffn.bias.empty());
  EXPECT_FALSE(m.layers[3].ffn.bias.empty());
  // Position biases of the ratio-4 layer 2 (main [4, 256] and indexer [4, 256]) and ratio-16 layer 3.
  for (const auto& [name, vec] : {std::pair{"layers.2.attn.compressor.ape", &m.layers[2].attn.comp_ape},
                                  std::pair{"layers.2.attn.indexer.compressor.ape", &m.layers[2].attn.idx_comp_ape},
                                  std::pair{"layers.3.attn.compressor.ape", &m.layers[3].attn.comp_ape}}) {
    auto a = ck->tensor(name);
    ASSERT_TRUE(a.ok()) << name;
    ASSERT_EQ(static_cast<int64_t>(vec->size()), a->numel()) << name;
    EXPECT_EQ((*vec)[a->numel() - 3], f32_at(*a, a->numel() - 3)) << name;
  }
  EXPECT_EQ(m.layers[2].attn.comp_wkv.out, 2 * m.config.head_dim);  // overlapped: 2x wide
  EXPECT_EQ(m.layers[3].attn.comp_wkv.out, m.config.head_dim);
  auto s = ck->tensor("hc_head_scale");
  ASSERT_TRUE(s.ok());
  ASSERT_NE(m.hc_head, nullptr);
  EXPECT_EQ(m.hc_head->scale, f32_at(*s, 0));
}

TEST(OracleLoadV4, LoadedTinyModelPiecesEqualWhole) {
  auto w = load_weights(tiny_v4_dir());
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
