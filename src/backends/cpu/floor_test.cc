// The floor F = NRMS(ref32, ref64) on the logits of a fixed prompt for the tiny presets of both
// variants (random weights in checkpoint formats): measured and reported, with top-1 agreement.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "backends/cpu/forward.h"
#include "family/deepseek_v41/layer_plan.h"
#include "family/deepseek_v41/synthetic_weights.h"
#include "family/deepseek_v41/preset.h"

namespace dsv4::cpu {
namespace {

void report_floor(family::Variant variant, const char* name) {
  auto w = family::synthetic_weights(family::preset_config(family::Preset::tiny, variant), 1, false);
  std::vector<int32_t> prompt(40);
  for (int i = 0; i < 40; ++i) prompt[i] = (i * 7919 + 13) % 129280;
  std::vector<int32_t> rows(40);
  for (int i = 0; i < 40; ++i) rows[i] = i;
  std::vector<float> logits[2];
  for (int k = 0; k < 2; ++k) {
    OracleOptions o;
    o.threads = 2;
    o.precision = k == 0 ? Precision::ref32 : Precision::ref64;
    auto oracle = std::move(Oracle::create(w, o)).value();
    auto r = oracle->forward({Piece{oracle->open_stream(), prompt, rows}});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    logits[k] = (*r)[0].logits;
  }
  const int64_t V = w->config.vocab_size;
  double num = 0, den = 0;
  int agree = 0;
  for (int r = 0; r < 40; ++r) {
    int64_t a = 0, b = 0;
    for (int64_t v = 0; v < V; ++v) {
      const double x = logits[0][r * V + v], y = logits[1][r * V + v];
      num += (x - y) * (x - y);
      den += y * y;
      if (x > logits[0][r * V + a]) a = v;
      if (y > logits[1][r * V + b]) b = v;
    }
    agree += a == b;
  }
  const double F = std::sqrt(num / den);
  std::printf("%s tiny preset: floor F = NRMS(ref32, ref64) = %.3e, top-1 agreement %d/40\n", name, F, agree);
  EXPECT_GT(F, 0.0);
  EXPECT_LT(F, 0.25);
}

TEST(OracleFloor, TinyPresetRef32AgainstRef64) { report_floor(family::Variant::v41, "V4.1"); }

// 40 rows cross ten ratio-4 groups, two ratio-16 groups and the window of 16.
TEST(OracleFloor, V4TinyPresetRef32AgainstRef64) { report_floor(family::Variant::v4, "V4-0731"); }

}  // namespace
}  // namespace dsv4::cpu
