// A synthetic tiny checkpoint generates varied text on the CPU oracle: positions do not collapse.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "backends/cpu/forward.h"
#include "family/deepseek_v41/layer_plan.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/synth.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

double correlation(const float* x, const float* y, int64_t n) {
  double mx = 0, my = 0;
  for (int64_t i = 0; i < n; ++i) mx += x[i], my += y[i];
  mx /= n, my /= n;
  double sxy = 0, sxx = 0, syy = 0;
  for (int64_t i = 0; i < n; ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  return sxy / std::sqrt(sxx * syy);
}

// The criterion for sane synthetic weights: greedy decoding uses many distinct tokens and
// the logits of different positions differ (random weights at the release's statistics collapse every
// position onto one direction and repeat one token).
TEST(SynthGeneration, TinyV41GreedyIsVariedAndPositionsDiffer) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("dsv4_synth_gen_{}", ::getpid());
  fs::remove_all(dir);
  family::SynthOptions o;
  o.seed = 0;
  o.sync = false;
  ASSERT_TRUE(family::write_synthetic_checkpoint(family::preset_config(family::Preset::tiny, family::Variant::v41),
                                                 dir.string(), o).ok());
  auto w = family::open_model(dir.string());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  auto oracle = cpu::Oracle::create(*w, {});
  ASSERT_TRUE(oracle.ok()) << oracle.status().to_string();
  const int64_t V = (*w)->config.vocab_size;
  const int32_t s = (*oracle)->open_stream();
  std::vector<int32_t> prompt = {0, 19923, 14, 1026, 6397, 5, 7, 11};
  std::vector<std::vector<float>> rows;
  std::vector<int32_t> generated;
  std::vector<int32_t> next = prompt;
  for (int step = 0; step < 24; ++step) {
    engine::Piece p{s, next, {static_cast<int32_t>(next.size()) - 1}};
    auto r = (*oracle)->forward({p});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    const std::vector<float>& logits = (*r)[0].logits;
    for (float x : logits) ASSERT_TRUE(std::isfinite(x));
    rows.push_back(logits);
    const int32_t tok = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    generated.push_back(tok);
    next = {tok};
  }
  const std::set<int32_t> distinct(generated.begin(), generated.end());
  EXPECT_GE(distinct.size(), 20u);
  double max_corr = 0;
  for (size_t i = 1; i < rows.size(); ++i)
    max_corr = std::max(max_corr, correlation(rows[i - 1].data(), rows[i].data(), V));
  EXPECT_LT(max_corr, 0.5) << "consecutive positions' logits are nearly parallel";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dsv4
