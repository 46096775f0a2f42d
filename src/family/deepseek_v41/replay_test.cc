// Bounded replay's cones: the boundary layer from each preset's layer plan (model-spec.md §2.3, §8), the
// closed form of the V4.1 cone, and every cone against a row-by-row dependency walk written apart from it.
#include "family/deepseek_v41/replay.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "family/deepseek_v41/preset.h"

namespace dsv4::family {
namespace {

// model-spec.md §2.3: layer 20 (the candidate source, ratio 1) is the last KV / index-key owner; layers
// 21-39 read its rows and their own 128-slot rings. §8: every 0731 layer from 2 on owns a compressor,
// layer 42 included, so nothing lies above the last owner.
TEST(Replay, BoundaryFromThePlan) {
  const ReplayShape v41 = replay_shape(build_plan(v41_flash_config()), 256, true);
  EXPECT_EQ(v41.from, 20);
  EXPECT_EQ(v41.window, 128);
  EXPECT_EQ(v41.state_rows, 256);
  for (int l = 0; l < 40; ++l) EXPECT_EQ(v41.tap[l], l >= 37 ? 1 : 0) << l;  // DSpark taps 37-39
  EXPECT_EQ(replay_shape(build_plan(v41_flash_config()), 256, false).tap, std::vector<uint8_t>(40, 0));
  EXPECT_FALSE(replay_shape(build_plan(v4_flash_0731_config()), 256, true).bounded());
  // The small presets: the last owner of their own plans (tiny: KV sources 2, 4, 5; small: 2, 5, 8).
  EXPECT_EQ(replay_shape(build_plan(preset_config(Preset::tiny, Variant::v41)), 32, true).from, 5);
  EXPECT_EQ(replay_shape(build_plan(preset_config(Preset::small, Variant::v41)), 256, true).from, 8);
  EXPECT_FALSE(replay_shape(build_plan(preset_config(Preset::tiny, Variant::v4)), 32, true).bounded());
}

// A piece without logits (an intermediate prompt piece) or with its last row's: layer 39 reads its input
// at the ring rows [T-256, T); each layer below reads W-1 = 127 rows further back, so layer l <= 38
// computes rows [T - 256 - (38 - l)*127, T) (hand-derived from the window rule of model-spec.md §3.6).
TEST(Replay, V41ClosedForm) {
  const ReplayShape s = replay_shape(build_plan(v41_flash_config()), 256, true);
  for (int64_t T : {4096, 8192, 65536}) {
    for (int64_t logit : {T - 1, T}) {
      const std::vector<int64_t> f = cone_first_rows(s, T, logit);
      ASSERT_EQ(f.size(), 20u);
      EXPECT_EQ(f[39 - 20], logit);
      for (int l = 20; l <= 38; ++l) EXPECT_EQ(f[l - 20], T - 256 - (38 - l) * 127) << "T " << T << " layer " << l;
    }
    EXPECT_EQ(tap_first_row(s, T), T - 256);
  }
  // 4096-row pieces: layer 20 computes 2,542 rows, the decoder 26,582 of its 81,920 row-layers.
  const std::vector<int64_t> f = cone_first_rows(s, 4096, 4095);
  int64_t rows = 0;
  for (int64_t first : f) rows += 4096 - first;
  EXPECT_EQ(4096 - f[0], 2542);
  EXPECT_EQ(rows, 26582);
  // Short pieces: the cone covers every row from some layer down; a scoring piece keeps its logit rows.
  EXPECT_EQ(cone_first_rows(s, 300, 299)[0], 0);
  EXPECT_EQ(cone_first_rows(s, 5000, 17)[19], 17);
  EXPECT_EQ(cone_first_rows(s, 5000, 17)[0], 0);
}

// The rows each layer must compute, walked row by row from the top as sets: at the last layer the logit
// rows; layer l's input rows = the ring rows, each needed row's window and the tap rows; layer l - 1's
// needed outputs = those input rows. The cone's first row must be the least needed row (a suffix covering
// every needed row, no longer than it must be).
// Returns, per layer, the least needed row (T: none).
std::vector<int64_t> walk(const ReplayShape& s, int64_t T, const std::set<int64_t>& logits) {
  std::vector<int64_t> least(s.n_layers, T);
  std::vector<uint8_t> out(T, 0);
  for (int64_t t : logits) out[t] = 1;
  for (int l = s.n_layers - 1; l >= s.from; --l) {
    std::vector<uint8_t> in(T, 0);
    for (int64_t t = std::max<int64_t>(0, T - s.state_rows); t < T; ++t) in[t] = 1;
    for (int64_t t = 0; t < T; ++t) {
      if (!out[t]) continue;
      least[l] = std::min(least[l], t);
      for (int64_t u = std::max<int64_t>(0, t - s.window + 1); u <= t; ++u) in[u] = 1;
    }
    out = in;
  }
  return least;
}

TEST(Replay, ConeIsTheLeastSuffixOfTheDependencies) {
  for (const Config& c : {preset_config(Preset::tiny, Variant::v41), preset_config(Preset::small, Variant::v41),
                          v41_flash_config()}) {
    const ModelPlan plan = build_plan(c);
    for (int64_t cap : {int64_t{plan.window}, int64_t{plan.window} + 16, 2 * int64_t{plan.window}}) {
      const ReplayShape s = replay_shape(plan, cap, true);
      ASSERT_TRUE(s.bounded());
      const int64_t W = plan.window;
      for (int64_t T : {int64_t{1}, W - 1, 3 * W + 5, 40 * W}) {
        std::vector<std::set<int64_t>> cases = {{}, {T - 1}, {T / 2, T - 1}};
        for (const std::set<int64_t>& logits : cases) {
          const int64_t first_logit = logits.empty() ? T : *logits.begin();
          const std::vector<int64_t> f = cone_first_rows(s, T, first_logit);
          const std::vector<int64_t> least = walk(s, T, logits);
          for (int l = s.from; l < s.n_layers; ++l) {
            EXPECT_EQ(f[l - s.from], least[l]) << c.num_hidden_layers << " layers, cap " << cap << ", T " << T
                                             << ", layer " << l;
            if (l > s.from) EXPECT_LE(f[l - s.from - 1], f[l - s.from]);  // nested: input holds output
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace dsv4::family
