// In-memory EXL3 re-encoding: on the synthetic release's weights it gives what the synthetic pack of
// the same seed loads to (the same stored linears, the same logits bit for bit), and the gate weights
// hold every Mia-layout linear as EXL3 with no dense values left.
#include "family/deepseek_v41/synthetic_exl3.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "backends/cpu/forward.h"
#include "family/deepseek_v41/model.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/synth.h"
#include "family/deepseek_v41/synth_exl3.h"

namespace dsv4::cpu {
namespace {

namespace fs = std::filesystem;

// The tiny shape with a 2,048-id vocabulary (as in the family's synth tests): the 129,280-row head
// would only slow the encoding down.
family::Config tiny_small_vocab() {
  family::Config c = family::preset_config(family::Preset::tiny, family::Variant::v41);
  c.vocab_size = 2048;
  c.dspark_noise_token_id = 2000;
  c.engram_compressed_vocab_size = 1500;
  c.image_token_id = 2047;
  return c;
}

std::vector<float> logits(std::shared_ptr<const family::Model> w, Precision p) {
  OracleOptions o;
  o.precision = p;
  o.threads = 2;
  auto oracle = std::move(Oracle::create(std::move(w), o)).value();
  std::vector<int32_t> toks, rows;
  for (int i = 0; i < 24; ++i) toks.push_back((i * 977 + 5) % 2048), rows.push_back(i);
  auto r = oracle->forward({Piece{oracle->open_stream(), toks, rows}});
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? (*r)[0].logits : std::vector<float>{};
}

void expect_same_stored(const family::Exl3Linear* a, const family::Exl3Linear* b, const char* what) {
  ASSERT_TRUE(a && b) << what;
  ASSERT_EQ(a->parts.size(), b->parts.size()) << what;
  for (size_t i = 0; i < a->parts.size(); ++i) {
    const exl3::Linear &x = a->parts[i].packed, &y = b->parts[i].packed;
    EXPECT_EQ(x.name, y.name) << what;
    EXPECT_EQ(x.bits, y.bits) << what;
    EXPECT_EQ(x.codebook, y.codebook) << what;
    EXPECT_TRUE(x.trellis == y.trellis && x.suh == y.suh && x.svh == y.svh) << what << " part " << i;
    EXPECT_TRUE(a->parts[i].in == b->parts[i].in && a->parts[i].out == b->parts[i].out) << what << " part " << i;
  }
}

TEST(SyntheticExl3, ReencodedReleaseEqualsTheLoadedPack) {
  const fs::path root = fs::temp_directory_path() / ("dsv4_cpu_reencode_" + std::to_string(::getpid()));
  fs::remove_all(root);
  const family::Config c = tiny_small_vocab();
  const uint64_t seed = 11;
  family::SynthOptions ro;
  ro.seed = seed;
  ro.sync = false;
  ASSERT_TRUE(family::write_synthetic_checkpoint(c, (root / "release").string(), ro).ok());
  family::Exl3SynthOptions po;
  po.seed = seed;
  po.sync = false;
  po.release_dir = (root / "release-engram").string();
  ASSERT_TRUE(family::write_synthetic_exl3_pack(c, (root / "pack").string(), po).ok());
  auto rel = family::open_model((root / "release").string());
  auto pack = family::open_model((root / "pack").string(), family::OpenOptions{po.release_dir});
  fs::remove_all(root);
  ASSERT_TRUE(rel.ok()) << rel.status().to_string();
  ASSERT_TRUE(pack.ok()) << pack.status().to_string();
  ASSERT_FALSE((*rel)->weights.head.exl3);
  auto re = family::reencode_as_exl3(c, **rel, seed);
  ASSERT_TRUE(re.ok()) << re.status().to_string();
  const family::ModelWeights &R = (*re)->weights, &P = (*pack)->weights;
  EXPECT_FALSE(family::present(R.head.weight)) << "a re-encoded linear keeps no dense views";
  expect_same_stored(R.head.exl3.get(), P.head.exl3.get(), "head");
  expect_same_stored(R.layers[0].wo_a.exl3.get(), P.layers[0].wo_a.exl3.get(), "layers.0.attn.wo_a");
  expect_same_stored(R.layers[2].experts[1].w2.exl3.get(), P.layers[2].experts[1].w2.exl3.get(),
                     "layers.2.ffn.experts.1.w2");
  expect_same_stored(R.layers[2].shared_w1.exl3.get(), P.layers[2].shared_w1.exl3.get(),
                     "layers.2.ffn.shared_experts.w1");
  ASSERT_TRUE(!R.dspark.empty() && !P.dspark.empty());
  expect_same_stored(R.dspark[0].main_proj.exl3.get(), P.dspark[0].main_proj.exl3.get(), "mtp.0.main_proj");
  // The shapes the backends check EXL3 linears against: wo_a's are the block-diagonal totals.
  EXPECT_EQ(R.layers[0].wo_a.out(), P.layers[0].wo_a.out());
  EXPECT_EQ(R.layers[0].wo_a.in(), P.layers[0].wo_a.in());
  EXPECT_EQ(R.layers[0].wq_a.out(), P.layers[0].wq_a.out());
  EXPECT_EQ(R.layers[0].wq_a.in(), P.layers[0].wq_a.in());
  EXPECT_EQ(R.layers[2].experts[1].w2.in(), P.layers[2].experts[1].w2.in());
  // Every linear the same: a linear left dense (or encoded otherwise) would move the logits.
  for (Precision p : {Precision::ref32, Precision::ref64}) {
    const auto a = logits(*re, p), b = logits(*pack, p);
    ASSERT_FALSE(a.empty());
    EXPECT_TRUE(a == b) << "the re-encoded release's logits differ from the pack's";
  }
}

TEST(SyntheticExl3, GateWeightsHoldTheLayoutsLinearsAsExl3) {
  const family::Config c = tiny_small_vocab();
  auto w = family::exl3_gate_weights(c);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const family::ModelWeights& m = (*w)->weights;
  EXPECT_TRUE(m.dspark.empty());
  for (const family::LayerWeights& b : m.layers) {
    EXPECT_TRUE(b.wq_a.exl3 && !family::present(b.wq_a.weight));
    EXPECT_TRUE(b.wo_a.exl3 && b.wo_a.exl3->parts.size() == static_cast<size_t>(c.o_groups));
    EXPECT_TRUE(b.shared_w2.exl3 && b.experts.back().w3.exl3);
    EXPECT_FALSE(b.gate_weight.exl3) << "the router stays native";
    if (family::present(b.engram_table)) EXPECT_TRUE(b.engram_wkv.exl3);
  }
  EXPECT_TRUE(m.head.exl3);
  // V4 / 0731 has no pack layout: refused, as exl3_pack_plan refuses it.
  EXPECT_FALSE(family::exl3_gate_weights(family::preset_config(family::Preset::tiny, family::Variant::v4)).ok());
}

}  // namespace
}  // namespace dsv4::cpu
