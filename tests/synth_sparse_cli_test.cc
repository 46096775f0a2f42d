// `dsv4 synth --sparse` and `--layers`: full-size checkpoints in almost no disk that validate and bind,
// cut configs that load, and the refused combinations.
#include <gtest/gtest.h>

#include "core/checkpoint.h"
#include "family/deepseek_v41/model.h"
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "core/checkpoint.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/tensors.h"
#include "family/deepseek_v41/weights.h"
#include "family/deepseek_v41/with_layers.h"

#include "cli_testing.h"

namespace {

namespace fs = std::filesystem;
using namespace dsv4;
using namespace dsv4::family;
using dsv4::cli_testing::CliRun;
using dsv4::cli_testing::run_dsv4;

// The checkpoint a model opened from a directory reads.
const Checkpoint& ckpt_of(const family::Model& m) { return dynamic_cast<const Checkpoint&>(*m.store); }

fs::path temp_dir(const std::string& tag) {
  const fs::path p = fs::temp_directory_path() / ("dsv4_sparse_cli_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

int64_t allocated_dir(const fs::path& dir) {
  int64_t s = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    struct stat st {};
    if (::stat(e.path().c_str(), &st) == 0) s += int64_t{st.st_blocks} * 512;
  }
  return s;
}

uint64_t header_length(const fs::path& shard) {
  std::ifstream in(shard, std::ios::binary);
  uint8_t b[8] = {};
  in.read(reinterpret_cast<char*>(b), 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{b[i]} << (8 * i);  // little-endian
  return n;
}

bool reads_zero(const Checkpoint& ck, const std::string& name) {
  auto t = ck.tensor(name);
  if (!t.ok() || t->nbytes == 0) return false;
  const uint8_t* b = t->bytes();
  for (int64_t i : {int64_t{0}, t->nbytes / 2, t->nbytes - 1})  // first, middle and last byte
    if (b[i] != 0) return false;
  return true;
}

struct Release {
  const char* variant;
  int64_t total_size;  // model-spec.md §5.1 (V4.1-Flash) and §1/§8 (V4-Flash-0731)
  int32_t layers;
  const char* last_expert;
};
constexpr Release kReleases[] = {{"v41", 510286023000, 40, "layers.39.ffn.experts.383.w2.weight"},
                                 {"v4-0731", 166878536440, 43, "layers.42.ffn.experts.255.w2.weight"}};

TEST(SynthSparseCli, FullReleaseInAlmostNoDisk) {
  for (const Release& rel : kReleases) {
    SCOPED_TRACE(rel.variant);
    const fs::path dir = temp_dir(std::string("full_") + rel.variant);
    const CliRun r = run_dsv4(std::string("synth --preset full --variant ") + rel.variant + " --sparse all --no-sync --out " +
                              dir.string());
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find(std::to_string(rel.total_size) + " bytes left as file holes"), std::string::npos) << r.out;
    EXPECT_LT(allocated_dir(dir), int64_t{64} << 20);  // headers, index, tokenizer, token map
    // Every shard has the logical size its table entries give: 8 + header + payload.
    const TensorTable table = expected_tensors(preset_config(Preset::full, *parse_variant(rel.variant)));
    std::map<int32_t, int64_t> payload;
    for (const TensorSpec& s : table.tensors) payload[s.shard] += s.bytes();
    ASSERT_EQ(payload.size(), 48u);
    for (const auto& [shard, bytes] : payload) {
      const fs::path f = dir / table.shard_file(shard);
      ASSERT_TRUE(fs::exists(f)) << f;
      EXPECT_EQ(static_cast<int64_t>(fs::file_size(f)), 8 + static_cast<int64_t>(header_length(f)) + bytes) << f;
    }
    auto m = family::open_model(dir.string());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_EQ(ckpt_of(**m).index_total_size().value_or(-1), rel.total_size);
    EXPECT_EQ(ckpt_of(**m).total_bytes(), rel.total_size);
    EXPECT_EQ(static_cast<int32_t>((*m)->weights.layers.size()), rel.layers);
    EXPECT_TRUE(reads_zero(ckpt_of(**m), rel.last_expert));
    EXPECT_TRUE(reads_zero(ckpt_of(**m), "head.weight"));
    if (std::string(rel.variant) == "v41") {
      EXPECT_TRUE(reads_zero(ckpt_of(**m), "layers.14.engram.embed.weight"));
      EXPECT_TRUE(fs::exists(dir / "engram_token_map.json"));
    }
    EXPECT_TRUE(fs::exists(dir / "tokenizer.json"));
    fs::remove_all(dir);
  }
}

TEST(SynthSparseCli, FullCutToThreeLayersLoads) {
  for (const Release& rel : kReleases) {
    SCOPED_TRACE(rel.variant);
    const fs::path dir = temp_dir(std::string("full3_") + rel.variant);
    const CliRun r = run_dsv4(std::string("synth --preset full --variant ") + rel.variant +
                              " --layers 3 --sparse all --no-sync --out " + dir.string());
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("(3 of " + std::to_string(rel.layers) + " layers)"), std::string::npos) << r.out;
    auto m = family::open_model(dir.string());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_EQ((*m)->config.num_hidden_layers, 3);
    EXPECT_EQ((*m)->config.dspark_target_layer_ids, (std::vector<int32_t>{0, 1, 2}));
    EXPECT_EQ((*m)->weights.layers.size(), 3u);
    EXPECT_EQ((*m)->weights.dspark.size(), 3u);
    EXPECT_TRUE(ckpt_of(**m).contains("layers.2.attn_norm.weight"));
    EXPECT_FALSE(ckpt_of(**m).contains("layers.3.attn_norm.weight"));
    EXPECT_TRUE(ckpt_of(**m).contains("mtp.2.norm.weight"));
    // The payload is what the uncut table holds for layers 0-2 and everything outside the backbone.
    int64_t expected = 0;
    for (const TensorSpec& s : expected_tensors(preset_config(Preset::full, *parse_variant(rel.variant))).tensors)
      if (s.name.rfind("layers.", 0) != 0 || std::stoi(s.name.substr(7)) < 3) expected += s.bytes();
    EXPECT_EQ(ckpt_of(**m).total_bytes(), expected);
    fs::remove_all(dir);
  }
}

// --layers on the written presets, and --sparse engram against the plain output of the same seed.
TEST(SynthSparseCli, TinyCutAndEngramHoles) {
  const fs::path plain = temp_dir("tiny_plain"), holes = temp_dir("tiny_engram");
  const std::string args = "synth --preset tiny --layers 5 --seed 9 --no-sync --out ";
  const CliRun a = run_dsv4(args + plain.string());
  ASSERT_EQ(a.status, 0) << a.out;
  const CliRun b = run_dsv4(args + holes.string() + " --sparse engram");
  ASSERT_EQ(b.status, 0) << b.out;
  auto pm = family::open_model(plain.string());
  auto hm = family::open_model(holes.string());
  ASSERT_TRUE(pm.ok()) << pm.status().to_string();
  ASSERT_TRUE(hm.ok()) << hm.status().to_string();
  EXPECT_EQ((*pm)->weights.layers.size(), 5u);
  EXPECT_EQ((*pm)->config.engram_layer_ids, (std::vector<int32_t>{1, 4}));  // tiny's Engram layers are below 5
  EXPECT_EQ((*pm)->config.candidate_source_layer_id, -1);                   // tiny's candidate source is layer 5
  int engram = 0;
  for (const TensorSpec& t : (*pm)->table.tensors) {
    const TensorView x = *ckpt_of(**pm).tensor(t.name), y = *ckpt_of(**hm).tensor(t.name);
    ASSERT_EQ(x.nbytes, y.nbytes);
    if (t.name.find(".engram.embed.") != std::string::npos) {
      ++engram;
      EXPECT_TRUE(reads_zero(ckpt_of(**hm), t.name)) << t.name;
    } else {
      EXPECT_EQ(std::memcmp(x.data, y.data, static_cast<size_t>(x.nbytes)), 0) << t.name;
    }
  }
  EXPECT_EQ(engram, 4);  // weight and scale of layers 1 and 4
  fs::remove_all(plain);
  fs::remove_all(holes);
}

TEST(SynthSparseCli, TinyV4CutLoads) {
  const fs::path dir = temp_dir("tiny_v4");
  const CliRun r = run_dsv4("synth --preset tiny --variant v4-0731 --layers 4 --no-sync --out " + dir.string());
  ASSERT_EQ(r.status, 0) << r.out;
  auto m = family::open_model(dir.string());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ((*m)->weights.layers.size(), 4u);
  EXPECT_EQ((*m)->config.num_hash_layers, 3);
  EXPECT_EQ((*m)->config.dspark_target_layer_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(ckpt_of(**m).total_bytes(),
            expected_tensors(*with_layers(preset_config(Preset::tiny, Variant::v4), 4)).total_bytes());
  fs::remove_all(dir);
}

TEST(SynthSparseCli, HelpNamesBothFlags) {
  const CliRun r = run_dsv4("synth --help");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("--sparse"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("load tests only"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--layers"), std::string::npos) << r.out;
}

TEST(SynthSparseCli, RefusesBadValuesAndCombinations) {
  const fs::path out = temp_dir("refused");
  struct Case {
    std::string args, message;
  };
  const Case cases[] = {
      {"--preset tiny --layers 0", "--layers 0: cannot keep 0 backbone layers: a model needs at least 1"},
      {"--preset full --layers -3", "--layers -3: cannot keep -3 backbone layers"},
      {"--preset tiny --sparse all --profile gate", "not --profile gate"},
      {"--preset tiny --sparse engram --format exl3", "not --format exl3"},
      {"--preset tiny --sparse some", "--sparse: some not in {none,all,engram}"},
  };
  for (const Case& c : cases) {
    const CliRun r = run_dsv4("synth " + c.args + " --no-sync --out " + out.string());
    EXPECT_NE(r.status, 0) << c.args;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << ": " << r.out;
  }
  EXPECT_FALSE(fs::exists(out / "config.json"));
  fs::remove_all(out);
}

}  // namespace
