// Sparse synthetic checkpoints: holes read as zeros and take no blocks, the rest is the plain writer's
// bytes, and the free-space estimate bounds what is allocated.
#include <gtest/gtest.h>

#include "core/checkpoint.h"
#include "family/deepseek_v41/model.h"
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/synth.h"
#include "family/deepseek_v41/weights.h"

namespace dsv4::family {
namespace {

// The checkpoint a model opened from a directory reads.
const Checkpoint& ckpt_of(const family::Model& m) { return dynamic_cast<const Checkpoint&>(*m.store); }

namespace fs = std::filesystem;

std::string temp_dir(const std::string& tag) {
  const fs::path p = fs::temp_directory_path() / fmt::format("dsv4_sparse_{}_{}", tag, ::getpid());
  fs::remove_all(p);
  return p.string();
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int64_t allocated(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? int64_t{st.st_blocks} * 512 : -1;
}

int64_t allocated_dir(const std::string& dir) {
  int64_t s = 0;
  for (const auto& e : fs::directory_iterator(dir)) s += allocated(e.path());
  return s;
}

// The tiny V4.1 shape with a 2,048-id vocabulary (as synth_test.cc): small files, every layer role.
Config tiny_small_vocab() {
  Config c = preset_config(Preset::tiny, Variant::v41);
  c.vocab_size = 2048;
  c.dspark_noise_token_id = 2000;
  c.engram_compressed_vocab_size = 1500;
  c.image_token_id = 2047;
  return c;
}

SynthOptions opts(uint64_t seed, SynthSparse sparse) {
  SynthOptions o;
  o.seed = seed;
  o.sync = false;
  o.sparse = sparse;
  return o;
}

bool is_engram_table(const std::string& name) {  // by name, independent of the writer's role test
  return name.find(".engram.embed.weight") != std::string::npos || name.find(".engram.embed.scale") != std::string::npos;
}

bool all_zero(const TensorView& v) {
  for (int64_t i = 0; i < v.nbytes; ++i)
    if (v.bytes()[i] != 0) return false;
  return true;
}

TEST(SynthSparse, EngramHolesTheRestIsThePlainWriters) {
  const Config c = tiny_small_vocab();
  const std::string plain = temp_dir("plain"), sparse = temp_dir("engram");
  ASSERT_TRUE(write_synthetic_checkpoint(c, plain, opts(7, SynthSparse::none)).ok());
  auto r = write_synthetic_checkpoint(c, sparse, opts(7, SynthSparse::engram));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  // Every file is there with the same size; the non-shard files and every shard header are identical.
  int files = 0;
  for (const auto& e : fs::directory_iterator(plain)) {
    const fs::path other = fs::path(sparse) / e.path().filename();
    ASSERT_TRUE(fs::exists(other)) << other;
    ASSERT_EQ(fs::file_size(e.path()), fs::file_size(other)) << other;
    const std::string a = slurp(e.path()), b = slurp(other);
    if (e.path().extension() == ".safetensors") {
      uint64_t n = 0;
      std::memcpy(&n, a.data(), 8);  // little-endian header length
      EXPECT_EQ(a.substr(0, 8 + n), b.substr(0, 8 + n)) << other;
    } else {
      EXPECT_EQ(a, b) << other;
    }
    ++files;
  }
  EXPECT_EQ(files, 18 + 4);
  auto pm = family::open_model(plain);
  auto sm = family::open_model(sparse);
  ASSERT_TRUE(pm.ok() && sm.ok()) << sm.status().to_string();
  int64_t holes = 0;
  for (const TensorSpec& t : (*sm)->table.tensors) {
    const TensorView a = *ckpt_of(**pm).tensor(t.name), b = *ckpt_of(**sm).tensor(t.name);
    ASSERT_EQ(a.nbytes, b.nbytes);
    if (is_engram_table(t.name)) {
      EXPECT_TRUE(all_zero(b)) << t.name;
      EXPECT_FALSE(all_zero(a)) << t.name;  // so the comparison above means something
      holes += t.bytes();
    } else {
      EXPECT_EQ(std::memcmp(a.data, b.data, static_cast<size_t>(a.nbytes)), 0) << t.name;
    }
  }
  EXPECT_EQ(r->hole_bytes, holes);
  EXPECT_GT(holes, 300000);  // 2 layers x ~6,000 rows x (64 + 2) bytes
  // The Engram shards' holes hold no blocks (the tables are the larger part of those shards).
  const int64_t saved = allocated_dir(plain) - allocated_dir(sparse);
  EXPECT_GE(saved, holes - 4 * 65536) << "plain " << allocated_dir(plain) << " sparse " << allocated_dir(sparse);
  fs::remove_all(plain);
  fs::remove_all(sparse);
}

TEST(SynthSparse, AllHolesBindAndReadZeros) {
  const Config c = tiny_small_vocab();
  const std::string dir = temp_dir("all");
  auto r = write_synthetic_checkpoint(c, dir, opts(3, SynthSparse::all));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const TensorTable t = expected_tensors(c);
  EXPECT_EQ(r->hole_bytes, t.total_bytes());
  EXPECT_EQ(r->payload_bytes, t.total_bytes());
  auto m = family::open_model(dir);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(ckpt_of(**m).index_total_size().value_or(-1), t.total_bytes());
  for (const TensorSpec& s : t.tensors) EXPECT_TRUE(all_zero(*ckpt_of(**m).tensor(s.name))) << s.name;
  fs::remove_all(dir);
}

TEST(SynthSparse, DiskEstimateBoundsWhatIsAllocated) {
  const Config c = tiny_small_vocab();
  for (SynthSparse s : {SynthSparse::none, SynthSparse::all, SynthSparse::engram}) {
    SCOPED_TRACE(std::string(synth_sparse_name(s)));
    const std::string dir = temp_dir(std::string(synth_sparse_name(s)));
    ASSERT_TRUE(write_synthetic_checkpoint(c, dir, opts(1, s)).ok());
    int64_t logical = 0;
    for (const auto& e : fs::directory_iterator(dir)) logical += static_cast<int64_t>(fs::file_size(e.path()));
    int64_t hole_bytes = 0;
    for (const TensorSpec& t : expected_tensors(c).tensors)
      if (s == SynthSparse::all || (s == SynthSparse::engram && is_engram_table(t.name))) hole_bytes += t.bytes();
    const int64_t need = synth_disk_bytes(c, s);
    EXPECT_LE(allocated_dir(dir), need);
    if (s == SynthSparse::none) EXPECT_GE(need, logical);  // nothing is a hole: every byte counts
    else EXPECT_LT(need, synth_disk_bytes(c, SynthSparse::none) - hole_bytes / 2);  // holes do not count
    fs::remove_all(dir);
  }
}

TEST(SynthSparse, DiskEstimateOfTheFullPresets) {
  for (Variant v : {Variant::v41, Variant::v4}) {
    SCOPED_TRACE(std::string(variant_name(v)));
    const Config c = preset_config(Preset::full, v);
    const TensorTable t = expected_tensors(c);
    int64_t engram = 0;
    for (const TensorSpec& s : t.tensors)
      if (is_engram_table(s.name)) engram += s.bytes();
    constexpr int64_t kMetadata = int64_t{64} << 20;  // headers, index, tokenizer, token map, edges
    const int64_t all = synth_disk_bytes(c, SynthSparse::all);
    EXPECT_GT(all, 0);
    EXPECT_LT(all, kMetadata);
    EXPECT_GT(synth_disk_bytes(c, SynthSparse::none), t.total_bytes());
    EXPECT_LT(synth_disk_bytes(c, SynthSparse::none), t.total_bytes() + kMetadata);
    const int64_t e = synth_disk_bytes(c, SynthSparse::engram);
    EXPECT_GT(e, t.total_bytes() - engram);
    EXPECT_LT(e, t.total_bytes() - engram + kMetadata);
    if (v == Variant::v41) EXPECT_EQ(engram, (int64_t{384006168} + 384016682) * (256 + 8));  // model-spec §2.1 rows
  }
}

TEST(SynthSparse, SpaceCheckRefusesWhatDoesNotFit) {
  EXPECT_TRUE(check_synth_space("OUT", "/", 1000, 1000).ok());
  EXPECT_TRUE(check_synth_space("OUT", "/", 0, 0).ok());
  const Status s = check_synth_space("/data/ck", "/data", 510286023000, 3000000000);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::resource_exhausted);
  EXPECT_NE(s.message().find("/data/ck needs 510.3 GB"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("/data has 3.0 GB free"), std::string::npos) << s.message();
  const Status small = check_synth_space("o", "/", 35000000, 34999999);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.message().find("35.0 MB"), std::string::npos) << small.message();
}

TEST(SynthSparse, ParsesModes) {
  EXPECT_EQ(*parse_synth_sparse("all"), SynthSparse::all);
  EXPECT_EQ(*parse_synth_sparse("engram"), SynthSparse::engram);
  EXPECT_EQ(*parse_synth_sparse("none"), SynthSparse::none);
  EXPECT_FALSE(parse_synth_sparse("some").ok());
}

}  // namespace
}  // namespace dsv4::family
