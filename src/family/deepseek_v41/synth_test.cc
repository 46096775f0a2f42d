// Synthetic checkpoints: validate against the plan, deterministic bytes, scales by the release rules.
#include "family/deepseek_v41/synth.h"

#include <gtest/gtest.h>

#include "core/checkpoint.h"
#include "family/deepseek_v41/model.h"
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/bf16.h"
#include "core/fp4.h"
#include "core/fp8.h"
#include "core/ue8m0.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/weights.h"

namespace dsv4::family {
namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& tag) {
  const fs::path p = fs::temp_directory_path() / fmt::format("dsv4_family_{}_{}", tag, ::getpid());
  fs::remove_all(p);
  return p.string();
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The tiny shape with a 2,048-id vocabulary: any consistent config of the family is writable, and the
// 66 MB embedding/head tables of the real vocabulary would only slow these tests down.
Config tiny_small_vocab() {
  Config c = preset_config(Preset::tiny, Variant::v41);
  c.vocab_size = 2048;
  c.dspark_noise_token_id = 2000;
  c.engram_compressed_vocab_size = 1500;
  c.image_token_id = 2047;
  return c;
}

SynthOptions fast(uint64_t seed) {
  SynthOptions o;
  o.seed = seed;
  o.sync = false;
  return o;
}

TEST(Synth, TinyV41ValidatesAndBinds) {
  const std::string dir = temp_dir("v41");
  const Config c = preset_config(Preset::tiny, Variant::v41);
  auto r = write_synthetic_checkpoint(c, dir, fast(7));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto m = open_model(dir);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(dynamic_cast<const Checkpoint&>(*(*m)->store).tensor_count(), static_cast<int64_t>((*m)->table.tensors.size()));
  EXPECT_EQ(dynamic_cast<const Checkpoint&>(*(*m)->store).index_total_size().value_or(-1), (*m)->table.total_bytes());
  EXPECT_EQ(config_to_json((*m)->config), config_to_json(c));
  ASSERT_EQ((*m)->weights.layers.size(), 10u);
  EXPECT_TRUE(present((*m)->weights.layers[1].engram_table));
  EXPECT_TRUE((*m)->weights.layers[5].compressor_wkv.held());
  EXPECT_FALSE((*m)->weights.layers[5].compressor_wgate.held());
  EXPECT_TRUE((*m)->weights.dspark[2].markov_head.held());

  // FP8 weight tiles: the UE8M0 scale is pow2ceil(amax/448), so each tile's largest |code| value lies
  // in (224, 448] (formats.md: e4m3 max 448).
  const Fp8Linear& wq = (*m)->weights.layers[3].wq_b;  // e4m3 [512, 128], scale [16, 4]
  const int64_t out = wq.weight.dim(0), in = wq.weight.dim(1);
  for (int64_t tr = 0; tr < out / 32; ++tr)
    for (int64_t tc = 0; tc < in / 32; ++tc) {
      float mx = 0;
      for (int64_t r = tr * 32; r < tr * 32 + 32; ++r)
        for (int64_t k = tc * 32; k < tc * 32 + 32; ++k)
          mx = std::max(mx, std::fabs(e4m3_to_f32(wq.weight.bytes()[r * in + k])));
      EXPECT_GE(mx, 224.0f);  // values in (224, 232) round down to 224
      EXPECT_LE(mx, 448.0f);
      const uint8_t s = wq.scale.bytes()[tr * (in / 32) + tc];
      EXPECT_NE(s, 255);  // never NaN
    }
  // FP4 expert blocks of 32 along K: largest |e2m1| in (3, 6] (pow2ceil(amax/6)).
  const Fp4Linear& w1 = (*m)->weights.layers[2].experts[3].w1;  // i8 [64, 128], scale [64, 8]
  for (int64_t r = 0; r < w1.weight.dim(0); ++r)
    for (int64_t b = 0; b < w1.scale.dim(1); ++b) {
      float mx = 0;
      for (int64_t j = 0; j < 16; ++j) {
        const uint8_t byte = w1.weight.bytes()[r * w1.weight.dim(1) + b * 16 + j];
        mx = std::max({mx, std::fabs(e2m1_to_f32(e2m1_nibble(byte, 0))), std::fabs(e2m1_to_f32(e2m1_nibble(byte, 1)))});
      }
      EXPECT_GE(mx, 3.0f);  // (3, 3.5) rounds to 3
      EXPECT_LE(mx, 6.0f);
    }
  // Norm weights near 1.
  const TensorView& n = (*m)->weights.layers[4].attn_norm;
  for (int64_t i = 0; i < n.numel(); ++i) {
    uint16_t b;
    std::memcpy(&b, n.bytes() + 2 * i, 2);
    EXPECT_NEAR(bf16_to_f32(b), 1.0f, 0.18f);  // 1 + 0.05 g, |g| <= 2 sqrt(3)
  }
  fs::remove_all(dir);
}

TEST(Synth, WritesTokenizerAndTokenMap) {
  const std::string dir = temp_dir("tok");
  const Config c = tiny_small_vocab();
  auto r = write_synthetic_checkpoint(c, dir, fast(5));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->wrote_tokenizer);
  // tokenizer.json is the V4.1 tokenizer: 128,000 BPE entries + added tokens up to id 129,279
  // (tokenizer-and-chat.md §1.4).
  const auto tok = nlohmann::json::parse(slurp(fs::path(dir) / "tokenizer.json"));
  EXPECT_EQ(tok["model"]["vocab"].size(), 128000u);
  const auto map = nlohmann::json::parse(slurp(fs::path(dir) / "engram_token_map.json"))["token_map"];
  ASSERT_EQ(static_cast<int64_t>(map.size()), c.vocab_size);
  std::vector<bool> used(static_cast<size_t>(c.engram_compressed_vocab_size), false);
  for (const auto& v : map) {
    ASSERT_GE(v.get<int64_t>(), 0);
    ASSERT_LT(v.get<int64_t>(), c.engram_compressed_vocab_size);
    used[v.get<size_t>()] = true;
  }
  EXPECT_EQ(std::count(used.begin(), used.end(), true), c.engram_compressed_vocab_size);
  EXPECT_EQ(map[2].get<int>(), 2);  // pad keeps its id, as in the release map
  fs::remove_all(dir);
}

TEST(Synth, RealVocabularyGetsTheReleaseTokenMap) {
  // tokenizer-and-chat.md §3.3 (reconstructed map): 99,092 compressed ids; BOS, "Hello", ",", " my",
  // " dog" = [0, 19923, 14, 1026, 6397] -> [0, 15844, 14, 851, 5327]; 128000 -> 97812; 129279 -> 99091.
  auto m = synth_engram_token_map(preset_config(Preset::tiny, Variant::v41));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->compressed_vocab_size, 99092);
  EXPECT_EQ(m->pad_id, 2);
  EXPECT_EQ(m->token_map[19923], 15844);
  EXPECT_EQ(m->token_map[1026], 851);
  EXPECT_EQ(m->token_map[6397], 5327);
  EXPECT_EQ(m->token_map[128000], 97812);
  EXPECT_EQ(m->token_map[129279], 99091);
}

TEST(Synth, TinyV4ValidatesAndHashTableIsValid) {
  const std::string dir = temp_dir("v4");
  const Config c = preset_config(Preset::tiny, Variant::v4);
  ASSERT_TRUE(write_synthetic_checkpoint(c, dir, fast(3)).ok());
  auto m = open_model(dir);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  // tid2eid rows: k distinct expert ids in [0, E).
  const TensorView& t = (*m)->weights.layers[0].tid2eid;
  ASSERT_EQ(t.dim(1), c.num_experts_per_tok);
  for (int64_t r = 0; r < t.dim(0); r += 997) {
    std::vector<int64_t> ids(static_cast<size_t>(t.dim(1)));
    std::memcpy(ids.data(), t.bytes() + r * t.dim(1) * 8, ids.size() * 8);
    for (size_t j = 0; j < ids.size(); ++j) {
      EXPECT_GE(ids[j], 0);
      EXPECT_LT(ids[j], c.n_routed_experts);
      for (size_t k = 0; k < j; ++k) EXPECT_NE(ids[j], ids[k]);
    }
  }
  fs::remove_all(dir);
}

TEST(Synth, SameSeedSameBytesOtherSeedOtherBytes) {
  // `b` is written by 4 threads taking shards out of order: the files must not change.
  const Config c = tiny_small_vocab();
  const std::string a = temp_dir("a"), b = temp_dir("b"), d = temp_dir("d");
  ASSERT_TRUE(write_synthetic_checkpoint(c, a, fast(11)).ok());
  SynthOptions threaded = fast(11);
  threaded.threads = 4;
  int32_t calls = 0, last = 0;
  threaded.progress = [&](const SynthProgress& p) {
    ++calls;
    EXPECT_EQ(p.shard, last + 1);  // counts written shards, one call at a time
    last = p.shard;
  };
  ASSERT_TRUE(write_synthetic_checkpoint(c, b, threaded).ok());
  EXPECT_EQ(calls, 18);
  ASSERT_TRUE(write_synthetic_checkpoint(c, d, fast(12)).ok());
  int files = 0;
  for (const auto& e : fs::directory_iterator(a)) {
    const std::string name = e.path().filename().string();
    const std::string x = slurp(e.path());
    EXPECT_EQ(x, slurp(fs::path(b) / name)) << name;
    if (name.find("safetensors") != std::string::npos && name.find("index") == std::string::npos)
      EXPECT_NE(x, slurp(fs::path(d) / name)) << name;
    ++files;
  }
  EXPECT_EQ(files, 18 + 4);  // shards, index, config.json, tokenizer.json, engram_token_map.json
  fs::remove_all(a);
  fs::remove_all(b);
  fs::remove_all(d);
}

TEST(Synth, ValidateNamesTheBrokenTensors) {
  const std::string dir = temp_dir("broken");
  Config c = tiny_small_vocab();
  ASSERT_TRUE(write_synthetic_checkpoint(c, dir, fast(1)).ok());
  // Claim one more routed expert than the shards hold: every layer misses expert 8's 6 tensors and
  // every router is mis-shaped.
  c.n_routed_experts = 9;
  std::ofstream(fs::path(dir) / "config.json") << config_to_json(c);
  auto m = open_model(dir);
  ASSERT_FALSE(m.ok());
  const std::string& msg = m.status().message();
  EXPECT_NE(msg.find("60 missing"), std::string::npos) << msg.substr(0, 300);
  EXPECT_NE(msg.find("missing: layers.0.ffn.experts.8.w1.weight"), std::string::npos);
  EXPECT_NE(msg.find("layers.9.ffn.gate.weight: shape [8, 256], expected [9, 256]"), std::string::npos);
  EXPECT_NE(msg.find("layers.9.ffn.gate.bias_vl: shape [8], expected [9]"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dsv4::family
