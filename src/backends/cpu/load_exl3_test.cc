// The oracle on a synthetic tiny EXL3 pack (Mia layout): it loads and generates, its EXL3 linears equal
// the exact decode, the exact equalities hold, and broken packs or release shards are refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "backends/cpu/forward.h"
#include "backends/cpu/exl3_linear.h"
#include "backends/cpu/numerics.h"
#include "family/deepseek_v41/model.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/synth_exl3.h"
#include "formats/exl3/pack.h"

namespace dsv4::cpu {
namespace {

namespace fs = std::filesystem;

const std::string& pack_dir() {
  static const std::string dir = [] {
    const std::string d = std::string(DSV4_BINARY_DIR) + "/cpu_exl3_test_pack";
    family::Exl3SynthOptions o;
    o.seed = 3;
    o.sync = false;
    o.release_dir = d + "/release-engram";
    auto r = family::write_synthetic_exl3_pack(family::preset_config(family::Preset::tiny, family::Variant::v41), d, o);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return d;
  }();
  return dir;
}
std::string release_dir() { return pack_dir() + "/release-engram"; }

std::shared_ptr<const family::Model> pack_weights() {
  static std::shared_ptr<const family::Model> w = [] {
    auto r = family::open_model(pack_dir(), family::OpenOptions{release_dir()});
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? *r : nullptr;
  }();
  return w;
}

std::unique_ptr<Oracle> oracle() {
  OracleOptions o;
  o.threads = 2;
  return std::move(Oracle::create(pack_weights(), o)).value();
}

std::vector<float> run_pieces(Oracle& o, const std::vector<int32_t>& t, const std::vector<int>& sizes) {
  const int32_t s = o.open_stream();
  std::vector<float> all;
  size_t at = 0;
  for (int n : sizes) {
    std::vector<int32_t> rows(n);
    for (int i = 0; i < n; ++i) rows[i] = i;
    auto r = o.forward({Piece{s, {t.begin() + at, t.begin() + at + n}, rows}});
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    all.insert(all.end(), (*r)[0].logits.begin(), (*r)[0].logits.end());
    at += n;
  }
  return all;
}

std::vector<int32_t> prompt(int n) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 104729 + 7) % 129280;
  return t;
}

TEST(Exl3Pack, LoadsAndGenerates) {
  ASSERT_NE(pack_weights(), nullptr);
  auto o = oracle();
  const int32_t s = o->open_stream();
  std::vector<int32_t> next = {0, 19923, 14, 1026, 6397, 5, 7, 11}, generated;
  for (int step = 0; step < 12; ++step) {
    auto r = o->forward({Piece{s, next, {static_cast<int32_t>(next.size()) - 1}}});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    const std::vector<float>& l = (*r)[0].logits;
    for (float x : l) ASSERT_TRUE(std::isfinite(x));
    next = {static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin())};
    generated.push_back(next[0]);
  }
  EXPECT_GE(std::set<int32_t>(generated.begin(), generated.end()).size(), 6u) << "greedy output collapsed";
}

// y = x·W with W from exl3::dense_weight (the decoder checked bit-exact against ExLlamaV3's fixtures,
// evaluated exactly and rounded once to fp32), summed in long double.
void expect_matches_dense(const Checkpoint& ck, const std::string& prefix, const family::Exl3Part& P) {
  auto L = exl3::load_linear(ck, prefix);
  ASSERT_TRUE(L.ok()) << L.status().to_string();
  const std::vector<float> W = exl3::dense_weight(*L);
  std::vector<double> x(P.in);
  for (int64_t k = 0; k < P.in; ++k) x[k] = round_bf16(static_cast<float>(std::sin(0.37 * k + 1.0)));
  family::Exl3Linear one;
  one.parts.push_back(P);
  one.in = P.in;
  one.out = P.out;
  ThreadPool pool(2);
  std::vector<double> y(P.out);
  exl3_linear_acc<double>(pool, x.data(), 1, one, y.data());
  double max_err = 0, max_y = 0;
  for (int64_t n = 0; n < P.out; ++n) {
    long double ref = 0, mag = 0;
    for (int64_t k = 0; k < P.in; ++k) ref += (long double)x[k] * W[k * L->out_features + n], mag += std::fabs(x[k] * W[k * L->out_features + n]);
    max_err = std::max(max_err, std::fabs(double(y[n] - ref)) / double(mag));
    max_y = std::max(max_y, std::fabs(double(ref)));
  }
  // W holds fp32-rounded exact values (relative error <= 2^-24 each); the rotated double path is exact
  // to ~1e-15. So |y - ref| <= 2^-24 · Σ|x·W| plus rounding noise.
  EXPECT_LT(max_err, 1.0e-7) << prefix;
  EXPECT_GT(max_y, 0.0) << prefix;
}

TEST(Exl3Pack, LinearsEqualTheExactDecode) {
  ASSERT_NE(pack_weights(), nullptr);
  const family::ModelWeights& m = pack_weights()->weights;
  auto ck = Checkpoint::open(pack_dir());
  ASSERT_TRUE(ck.ok());
  ASSERT_TRUE(m.layers[3].wq_a.exl3);
  expect_matches_dense(*ck, "layers.3.attn.wq_a", m.layers[3].wq_a.exl3->parts[0]);
  ASSERT_TRUE(m.layers[0].wo_a.exl3);
  ASSERT_EQ(m.layers[0].wo_a.exl3->parts.size(), 2u);
  expect_matches_dense(*ck, "layers.0.attn.wo_a.slice.1", m.layers[0].wo_a.exl3->parts[1]);
  ASSERT_TRUE(m.layers[2].experts[1].w2.exl3);  // in 64 of 128 padded
  expect_matches_dense(*ck, "layers.2.ffn.experts.1.w2", m.layers[2].experts[1].w2.exl3->parts[0]);
  ASSERT_TRUE(m.layers[2].shared_w1.exl3);  // MCG marker
  expect_matches_dense(*ck, "layers.2.ffn.shared_experts.w1", m.layers[2].shared_w1.exl3->parts[0]);
  ASSERT_TRUE(m.head.exl3);
  EXPECT_EQ(m.head.out(), 129280);
  // The trellis stays in the pack's mapped shard: borrowed, not copied.
  EXPECT_TRUE(m.layers[3].wq_a.exl3->parts[0].packed.trellis.borrowed());
  EXPECT_TRUE(pack_weights()->store->locate(m.layers[3].wq_a.exl3->parts[0].packed.trellis.bytes()).has_value());
}

TEST(Exl3Pack, EngramTablesAreTheReleaseShardsBytes) {
  ASSERT_NE(pack_weights(), nullptr);
  auto ck = Checkpoint::open(release_dir() + "/model-00017-of-00018.safetensors");
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  auto t = ck->tensor("layers.1.engram.embed.weight");
  ASSERT_TRUE(t.ok());
  const TensorView& E = pack_weights()->weights.layers[1].engram_table;
  ASSERT_EQ(E.nbytes, t->nbytes);
  EXPECT_EQ(std::memcmp(E.data, t->data, t->nbytes), 0);
}

TEST(Exl3Pack, PiecesEqualWholeAndVerifyEqualsSingleSteps) {
  auto o = oracle();
  const auto t = prompt(30);
  const auto whole = run_pieces(*o, t, {30});
  EXPECT_EQ(run_pieces(*o, t, {5, 12, 1, 12}), whole);
  EXPECT_EQ(run_pieces(*o, t, {24, 6}), run_pieces(*o, t, {24, 1, 1, 1, 1, 1, 1}));
}

// A copy of the release shards to break.
std::string broken_release(const std::string& name) {
  const std::string d = std::string(DSV4_BINARY_DIR) + "/cpu_exl3_broken_" + name;
  fs::remove_all(d);
  fs::copy(release_dir(), d);
  return d;
}

std::string load_error(const std::string& engram_dir) {
  auto r = family::open_model(pack_dir(), family::OpenOptions{engram_dir});
  return r.ok() ? std::string("loaded") : r.status().to_string();
}

TEST(Exl3Pack, RefusesMissingOrBrokenReleaseShards) {
  pack_dir();
  EXPECT_NE(load_error("").find("--engram-shards"), std::string::npos) << load_error("");
  const std::string missing = broken_release("missing");
  fs::remove(missing + "/model-00018-of-00018.safetensors");
  EXPECT_NE(load_error(missing).find("model-00018-of-00018.safetensors is missing"), std::string::npos) << load_error(missing);
  const std::string corrupt = broken_release("corrupt");
  {
    std::fstream f(corrupt + "/model-00017-of-00018.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-100, std::ios::end);
    f.put('\x5a');
  }
  const std::string e1 = load_error(corrupt);
  EXPECT_NE(e1.find("model-00017-of-00018.safetensors: SHA-256"), std::string::npos) << e1;
  const std::string truncated = broken_release("truncated");
  fs::resize_file(truncated + "/model-00018-of-00018.safetensors", 4096);
  const std::string e2 = load_error(truncated);
  EXPECT_NE(e2.find("model-00018-of-00018.safetensors: 4096 bytes"), std::string::npos) << e2;
  for (const auto& d : {missing, corrupt, truncated}) fs::remove_all(d);
}

TEST(Exl3Pack, RefusesATensorStorageThatDisagrees) {
  const std::string d = std::string(DSV4_BINARY_DIR) + "/cpu_exl3_bad_storage";
  fs::remove_all(d);
  fs::create_directories(d);
  for (const auto& e : fs::directory_iterator(pack_dir()))
    if (e.is_regular_file()) fs::copy_file(e.path(), d + "/" + e.path().filename().string());
  std::ifstream in(d + "/quantization_config.json");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  in.close();
  const size_t at = text.find("\"bits_per_weight\": 5");  // the first attention linear (5 bits, synth data)
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 20, "\"bits_per_weight\": 6");
  std::ofstream(d + "/quantization_config.json") << text;
  auto r = family::open_model(d, family::OpenOptions{release_dir()});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("tensor_storage bits_per_weight 6, the trellis has 5"), std::string::npos)
      << r.status().to_string();
  fs::remove_all(d);
}

TEST(Exl3Pack, RefusesATruncatedPackShardByName) {
  const std::string d = std::string(DSV4_BINARY_DIR) + "/cpu_exl3_truncated_pack";
  fs::remove_all(d);
  fs::create_directories(d);
  for (const auto& e : fs::directory_iterator(pack_dir()))
    if (e.is_regular_file()) fs::copy_file(e.path(), d + "/" + e.path().filename().string());
  fs::resize_file(d + "/model-00005-of-00018.safetensors", fs::file_size(d + "/model-00005-of-00018.safetensors") - 10);
  auto r = family::open_model(d, family::OpenOptions{release_dir()});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("model-00005-of-00018.safetensors"), std::string::npos) << r.status().to_string();
  fs::remove_all(d);
}

}  // namespace
}  // namespace dsv4::cpu
