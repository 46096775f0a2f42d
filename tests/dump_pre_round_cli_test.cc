// `dsv4 run --dump-pre-round` (test-only, not in --help) on the tiny preset: the values before rounding, rounded to
// bf16, give the oracle's own results that `--dump-hidden` writes (the attention and FFN inputs, the attention
// output, each layer's output streams), each layer's input streams are the previous layer's output (Engram layers
// aside), --pre-round-layers keeps to the layers named, and ref64 writes doubles.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "cli_testing.h"
#include "core/bf16.h"
#include "family/deepseek_v41/preset.h"
#include "npz_testing.h"

namespace {

namespace fs = std::filesystem;
using namespace dsv4::npz_testing;

std::vector<double> doubles_of(const Array& a, size_t width) {
  std::vector<double> v(a.data.size() / width);
  for (size_t i = 0; i < v.size(); ++i) {
    if (width == 8) {
      std::memcpy(&v[i], a.data.data() + 8 * i, 8);
    } else {
      float f;
      std::memcpy(&f, a.data.data() + 4 * i, 4);
      v[i] = f;
    }
  }
  return v;
}

// One rounding to bf16 (ref64: a double straight to bf16), as numpy's straddle.py does.
float round_bf16(double x) {
  if (x == 0 || !std::isfinite(x)) return static_cast<float>(x);
  int e = 0;
  std::frexp(x, &e);
  const double ulp = std::ldexp(1.0, std::max(e, -125) - 8);
  return static_cast<float>(std::nearbyint(x / ulp) * ulp);  // the default rounding mode: to nearest even
}

TEST(DumpPreRound, RoundsToTheOraclesOwnResultsOnTiny) {
  const fs::path dir = fs::temp_directory_path() / ("dsv4_pre_round_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto c = dsv4::family::preset_config(dsv4::family::Preset::tiny, dsv4::family::Variant::v41);
  const int64_t T = 5, C = c.hc_mult, D = c.hidden_size;
  const auto help = dsv4::cli_testing::run_dsv4("run --help");
  EXPECT_EQ(help.out.find("pre-round"), std::string::npos) << "a test-only flag shows in --help";
  for (const bool ref64 : {false, true}) {
    SCOPED_TRACE(ref64 ? "ref64" : "ref32");
    const std::string h = (dir / "h.npz").string(), p = (dir / "p.npz").string();
    const auto r = dsv4::cli_testing::run_dsv4(fmt::format(
        "run --preset tiny --seed 3 --ids 5,6,70000,8,9 --max-tokens 0 --threads 2 {} --dump-hidden {} "
        "--dump-pre-round {}", ref64 ? "--ref64" : "", h, p));
    ASSERT_EQ(r.status, 0) << r.out;
    const auto hidden = read_npz(h), pre = read_npz(p);
    const size_t width = ref64 ? 8 : 4;
    int checked = 0;
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      const struct { const char* pre; std::string hidden; int64_t n; } pairs[] = {
          {"attn_norm", fmt::format("attn_in_{:02d}", l), D}, {"wo_b", fmt::format("attn_out_{:02d}", l), D},
          {"ffn_norm", fmt::format("ffn_in_{:02d}", l), D}, {"ffn_post", fmt::format("layer_{:02d}", l), C * D}};
      for (const auto& q : pairs) {
        const std::string k = fmt::format("{}_{:02d}", q.pre, l);
        ASSERT_TRUE(pre.count(k)) << k;
        EXPECT_EQ(pre.at(k).shape, (std::vector<int64_t>{T, q.n})) << k;
        const std::vector<double> v = doubles_of(pre.at(k), width);
        const std::vector<float> want = floats_of(hidden.at(q.hidden));
        ASSERT_EQ(v.size(), want.size()) << k;
        for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(round_bf16(v[i]), want[i]) << k << " element " << i;
        ++checked;
      }
      const bool engram = std::find(c.engram_layer_ids.begin(), c.engram_layer_ids.end(), l) != c.engram_layer_ids.end();
      if (l > 0 && !engram) {  // the layer's input streams are the previous layer's output
        const std::vector<double> in = doubles_of(pre.at(fmt::format("h_in_{:02d}", l)), width);
        const std::vector<float> prev = floats_of(hidden.at(fmt::format("layer_{:02d}", l - 1)));
        ASSERT_EQ(in.size(), prev.size());
        for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(static_cast<float>(in[i]), prev[i]) << "h_in layer " << l;
      }
      // The probabilities: window + index_topk per head, each row's summing with the sink below 1.
      const auto& probs = pre.at(fmt::format("probs_{:02d}", l));
      EXPECT_EQ(probs.shape, (std::vector<int64_t>{T, c.num_attention_heads * (c.sliding_window + c.index_topk)}));
      for (double x : doubles_of(probs, width)) ASSERT_TRUE(x >= 0 && x <= 1) << "probs layer " << l;
    }
    EXPECT_EQ(checked, 4 * c.num_hidden_layers);
  }
  // Only the layers asked for.
  const std::string p = (dir / "one.npz").string();
  const auto r = dsv4::cli_testing::run_dsv4(
      "run --preset tiny --seed 3 --ids 5,6,70000 --max-tokens 0 --threads 2 --pre-round-layers 2 --dump-pre-round " + p);
  ASSERT_EQ(r.status, 0) << r.out;
  for (const auto& [name, a] : read_npz(p))
    EXPECT_TRUE(name == "tokens" || name.ends_with("_02")) << name;
  fs::remove_all(dir);
}

}  // namespace
