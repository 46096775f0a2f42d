// A synthetic tiny checkpoint written by the family's writer, opened in place: the views are its stored bytes,
// decoded they equal the stored codes times their scales, and the loaded model keeps the exact equalities.
#include "backends/cpu/linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "backends/cpu/forward.h"
#include "backends/cpu/oracle_testing.h"
#include "core/checkpoint.h"
#include "family/deepseek_v41/model.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/synth.h"

namespace dsv4::cpu {
namespace {

const std::string& tiny_dir() {
  static const std::string dir = oracle_testing::write_tiny_checkpoint("cpu_load_test_tiny", family::Variant::v41, 3);
  return dir;
}

// The bound views point into the mapped shards (nothing copied) and the oracle's row decode gives each stored
// code times its scale.
TEST(OracleLoad, ViewsAreTheStoredBytesAndDecodeToCodesTimesScales) {
  auto w = family::open_model(tiny_dir());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const family::Model& m = **w;
  auto ck = Checkpoint::open(tiny_dir());
  ASSERT_TRUE(ck.ok());
  const int64_t D = m.config.hidden_size;
  // embed row 5, element 7: the stored bf16 bits, read in place from the model's own mapping.
  auto emb = ck->tensor("embed.weight");
  ASSERT_TRUE(emb.ok());
  EXPECT_TRUE(m.store->locate(m.weights.embed.data).has_value());
  EXPECT_EQ(0, std::memcmp(m.weights.embed.bytes() + 2 * (5 * D + 7), emb->bytes() + 2 * (5 * D + 7), 2));
  // layers.3.attn.wq_a[40, 70] = e4m3(code) * 2^(scale[40/32, 70/32] - 127).
  auto wq = ck->tensor("layers.3.attn.wq_a.weight");
  auto sc = ck->tensor("layers.3.attn.wq_a.scale");
  ASSERT_TRUE(wq.ok() && sc.ok());
  const int64_t in = wq->dim(1), sin = sc->dim(1);
  const uint8_t code = wq->bytes()[40 * in + 70], sbyte = sc->bytes()[(40 / 32) * sin + 70 / 32];
  const family::Fp8Linear& W = m.weights.layers[3].wq_a;
  std::vector<float> row(in), ws(sin);
  fp8_weight_row(W, 40, row.data(), ws.data());
  EXPECT_EQ(row[70] * ws[70 / 32], e4m3_to_f32(code) * std::ldexp(1.0f, sbyte - 127));
  // Expert 1 of layer 2, w2 [D, I]: element (9, 33) is the high nibble of byte 16 of row 9.
  auto e = ck->tensor("layers.2.ffn.experts.1.w2.weight");
  auto es = ck->tensor("layers.2.ffn.experts.1.w2.scale");
  ASSERT_TRUE(e.ok() && es.ok());
  const uint8_t byte = e->bytes()[9 * e->dim(1) + 16];
  const family::Fp4Linear& X = m.weights.layers[2].experts[1].w2;
  std::vector<float> xr(X.in());
  e2m1_values(X.weight.bytes() + 9 * (X.in() / 2), X.in(), xr.data());
  EXPECT_EQ(xr[33] * ue8m0_to_f32(X.scale.bytes()[9 * (X.in() / 32) + 1]),
            e2m1_to_f32(byte >> 4) * std::ldexp(1.0f, es->bytes()[9 * es->dim(1) + 1] - 127));
  EXPECT_EQ(m.config.num_hidden_layers, 10);
  EXPECT_EQ(m.weights.dspark.size(), 3u);
  EXPECT_EQ(m.engram_token_map.size(), 129280u);
}

TEST(OracleLoad, LoadedTinyModelPiecesEqualWhole) {
  auto w = family::open_model(tiny_dir());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  OracleOptions o;
  o.threads = 2;
  auto oracle = std::move(Oracle::create(*w, o)).value();
  std::vector<int32_t> t(36);
  for (int i = 0; i < 36; ++i) t[i] = (i * 104729 + 7) % 129280;
  const auto whole = oracle_testing::run_pieces(*oracle, t, {36});
  ASSERT_EQ(whole.size(), static_cast<size_t>(36) * 129280);
  for (float v : whole) ASSERT_TRUE(std::isfinite(v));
  EXPECT_EQ(oracle_testing::run_pieces(*oracle, t, {5, 12, 1, 18}), whole);
}

TEST(OracleLoad, MissingConfigIsNamed) {
  auto w = family::open_model(std::string(DSV4_BINARY_DIR) + "/no_such_model_dir");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("config.json"), std::string::npos) << w.status().to_string();
}

}  // namespace
}  // namespace dsv4::cpu
