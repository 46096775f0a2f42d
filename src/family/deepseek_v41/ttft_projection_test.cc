// The time-to-first-token projection on hand-computed cases: interpolation and extrapolation in the cached
// rows, a short last chunk, roles timed by a stand-in or missing, and bounded replay's cones on the tiny preset.
#include "family/deepseek_v41/ttft_projection.h"

#include <gtest/gtest.h>

#include "family/deepseek_v41/layer_roles.h"
#include "family/deepseek_v41/preset.h"

namespace dsv4::family {
namespace {

// Three-point curve at chunk 4: (0, 2), (8, 4), (16, 8).
TEST(TtftProjection, InterpolatesAndExtrapolatesInTheContext) {
  const std::vector<RoleTime> t = {{"a", 4, 16, 8.0}, {"a", 4, 0, 2.0}, {"a", 4, 8, 4.0}, {"b", 4, 8, 5.0}};
  bool ex = true;
  EXPECT_DOUBLE_EQ(*role_ms_at(t, "a", 4, 4, &ex), 3.0);  // halfway between (0, 2) and (8, 4)
  EXPECT_FALSE(ex);
  EXPECT_DOUBLE_EQ(*role_ms_at(t, "a", 4, 12, &ex), 6.0);  // halfway between (8, 4) and (16, 8)
  EXPECT_FALSE(ex);
  EXPECT_DOUBLE_EQ(*role_ms_at(t, "a", 4, 16, &ex), 8.0);  // a measured point
  EXPECT_FALSE(ex);
  EXPECT_DOUBLE_EQ(*role_ms_at(t, "a", 4, 24, &ex), 12.0);  // 8 + (24 - 16) * 4/8 on the last segment's line
  EXPECT_TRUE(ex);
  EXPECT_DOUBLE_EQ(*role_ms_at(t, "b", 4, 0, &ex), 5.0);  // one context: its time everywhere
  EXPECT_TRUE(ex);
  EXPECT_FALSE(role_ms_at(t, "a", 8, 0, &ex));  // no measurement at chunk 8
  EXPECT_FALSE(role_ms_at(t, "c", 4, 0, &ex));
  // Two layers of one role at a point: their mean. A falling line stops at 0: (0, 4), (8, 2) at 40 -> -6 -> 0.
  const std::vector<RoleTime> u = {{"a", 4, 0, 3.0}, {"a", 4, 0, 5.0}, {"a", 4, 8, 2.0}};
  EXPECT_DOUBLE_EQ(*role_ms_at(u, "a", 4, 4, &ex), 3.0);  // (4 + 2) / 2
  EXPECT_DOUBLE_EQ(*role_ms_at(u, "a", 4, 40, &ex), 0.0);
}

// Two roles: layers 0 and 1 "window", layer 2 "hca-r128"; no drafter, no decoder.
ModelPlan two_role_plan() {
  ModelPlan p;
  p.n_layers = 3;
  p.window = 4;
  for (int32_t l = 0; l < 3; ++l) {
    LayerPlan x;
    x.id = l;
    if (l == 2) x.attn = AttnKind::v4_hca, x.compress_ratio = 128;
    p.layers.push_back(x);
  }
  return p;
}

TEST(TtftProjection, SumsChunksOverThePlanWithAShortLastChunk) {
  const ModelPlan plan = two_role_plan();
  // window: (0, 1), (8, 3). hca-r128: (0, 2), (4, 2), (8, 6). All at 4-row chunks.
  const std::vector<RoleTime> t = {{"window", 4, 0, 1.0},   {"window", 4, 8, 3.0},   {"hca-r128", 4, 0, 2.0},
                                   {"hca-r128", 4, 4, 2.0}, {"hca-r128", 4, 8, 6.0}};
  // P = 10, C = 4: chunks at contexts 0, 4, 8 of 4, 4, 2 rows.
  //   window per layer: 1 + 2 (interpolated at 4) + 3 * 2/4 = 4.5; two layers: 9.0
  //   hca-r128:         2 + 2 + 6 * 2/4 = 7.0
  //   total 16.0; every context inside [0, 8]
  TtftProjection r = project_ttft(plan, t, {}, {.prompt = 10, .chunk = 4});
  EXPECT_EQ(r.chunks, 3);
  EXPECT_EQ(r.last_chunk_rows, 2);
  EXPECT_TRUE(r.short_last_chunk());
  EXPECT_EQ(r.max_context, 8);
  EXPECT_FALSE(r.extrapolated);
  ASSERT_EQ(r.roles.size(), 2u);
  EXPECT_EQ(r.roles[0].role, "window");
  EXPECT_EQ(r.roles[0].layers, 2);
  EXPECT_DOUBLE_EQ(r.roles[0].ms, 9.0);
  EXPECT_EQ(r.roles[1].role, "hca-r128");
  EXPECT_EQ(r.roles[1].layers, 1);
  EXPECT_DOUBLE_EQ(r.roles[1].ms, 7.0);
  EXPECT_DOUBLE_EQ(r.ms, 16.0);
  EXPECT_EQ(r.row_layers, 30);  // 3 layers x 10 rows
  EXPECT_EQ(r.full_row_layers, 30);
  EXPECT_TRUE(r.complete());

  // P = 14: a fourth chunk at context 12 (2 rows), beyond the last measured context 8.
  //   window at 12: the line through (0, 1), (8, 3): 3 + 4 * 2/8 = 4; per layer 1 + 2 + 3 + 4 * 2/4 = 8; x2: 16
  //   hca-r128 at 12: the line through (4, 2), (8, 6): 6 + 4 = 10; 2 + 2 + 6 + 10 * 2/4 = 15
  //   total 31, extrapolated
  r = project_ttft(plan, t, {}, {.prompt = 14, .chunk = 4});
  EXPECT_EQ(r.chunks, 4);
  EXPECT_TRUE(r.extrapolated);
  EXPECT_TRUE(r.roles[0].extrapolated);
  EXPECT_DOUBLE_EQ(r.roles[0].ms, 16.0);
  EXPECT_DOUBLE_EQ(r.roles[1].ms, 15.0);
  EXPECT_DOUBLE_EQ(r.ms, 31.0);

  // P = 8: two full chunks at 0 and 4: window 2 * (1 + 2) = 6, hca-r128 2 + 2 = 4.
  r = project_ttft(plan, t, {}, {.prompt = 8, .chunk = 4});
  EXPECT_FALSE(r.short_last_chunk());
  EXPECT_DOUBLE_EQ(r.ms, 10.0);

  // A chunk size nobody measured: both roles missing, every layer reported, nothing summed.
  r = project_ttft(plan, t, {}, {.prompt = 8, .chunk = 2});
  EXPECT_EQ(r.missing_layers, 3);
  EXPECT_FALSE(r.complete());
  EXPECT_EQ(r.roles[0].timing, RoleTiming::missing);
  EXPECT_DOUBLE_EQ(r.ms, 0.0);
}

// The tiny V4.1 preset (10 layers + 3 DSpark stages; model-spec roles in preset.cc): Engram roles timed as
// their plain twins, an unmeasured role reported with its layers, the drafter listed and not counted.
TEST(TtftProjection, StandInsMissingRolesAndTheDrafter) {
  const ModelPlan plan = build_plan(preset_config(Preset::tiny, Variant::v41));
  const std::vector<RoleStandIn> si = engram_stand_ins(plan);
  ASSERT_EQ(si.size(), 2u);
  EXPECT_EQ(si[0].role, "window+engram");
  EXPECT_EQ(si[0].timed_as, "window");
  EXPECT_EQ(si[1].role, "full-r2+engram");
  EXPECT_EQ(si[1].timed_as, "full-r2");
  // Every role but reindex-r1+cand (layer 7) measured at 1 ms per 8-row chunk, contexts 0 and 64.
  std::vector<RoleTime> t;
  for (const RoleLayer& r : plan_roles(plan))
    if (r.role.find("engram") == std::string::npos && r.role != "reindex-r1+cand" && r.role != "dspark")
      for (int64_t L : {0, 64}) t.push_back({r.role, 8, L, 1.0});
  // P = 16, C = 8: two chunks; each counted layer 2 ms; 9 counted layers (all but layer 7): 18 ms.
  const TtftProjection r = project_ttft(plan, t, si, {.prompt = 16, .chunk = 8});
  EXPECT_EQ(r.layers, 10);
  EXPECT_EQ(r.missing_layers, 1);
  EXPECT_DOUBLE_EQ(r.ms, 18.0);
  int32_t layers = 0;
  for (const RoleContribution& c : r.roles) {
    if (c.role == "dspark") {
      EXPECT_EQ(c.timing, RoleTiming::not_counted);
      EXPECT_EQ(c.layers, 3);
      EXPECT_DOUBLE_EQ(c.ms, 0.0);
      continue;
    }
    layers += c.layers;
    if (c.role == "window+engram" || c.role == "full-r2+engram") {
      EXPECT_EQ(c.timing, RoleTiming::stand_in) << c.role;
      EXPECT_EQ(c.layers, 1) << c.role;
      EXPECT_DOUBLE_EQ(c.ms, 2.0) << c.role;
    } else if (c.role == "reindex-r1+cand") {
      EXPECT_EQ(c.timing, RoleTiming::missing);
      EXPECT_EQ(c.layers, 1);
    } else {
      EXPECT_EQ(c.timing, RoleTiming::measured) << c.role;
    }
  }
  EXPECT_EQ(layers, 10);  // no layer dropped
}

// Bounded replay on the tiny preset: W = 16, rings of 32 rows, first bounded layer 5 (replay_test.cc), taps
// 7-9 (their tap rows are the ring rows). Every role 6.4 ms per 64-row chunk at any context (0.1 ms a row).
// A 64-row piece, from the top (docs/replay.md, "The cone"): layer 9 computes its logit rows (the last: 1
// row; none in a piece without logits) and reads rows [min(64 - 32, 63 - 15), 64) = [32, 64); layer 8
// computes those 32 rows and reads [min(32, 32 - 15), 64) = [17, 64); layer 7 47 rows, reads [2, 64); layer
// 6 62 rows, reads [0, 64); layer 5 all 64.
TEST(TtftProjection, BoundedReplayScalesDecoderLayersByTheirCones) {
  const ModelPlan plan = build_plan(preset_config(Preset::tiny, Variant::v41));
  std::vector<RoleTime> t;
  for (const RoleLayer& r : plan_roles(plan))
    for (int64_t L : {0, 1 << 20}) t.push_back({r.role, 64, L, 6.4});
  TtftQuery off{.prompt = 128, .chunk = 64, .bounded_replay = false, .ring_capacity = 32};
  TtftQuery on = off;
  on.bounded_replay = true;
  // Off: 10 layers x 128 rows x 0.1 ms = 128 ms.
  TtftProjection r = project_ttft(plan, t, {}, off);
  EXPECT_EQ(r.bounded_from, -1);
  EXPECT_EQ(r.row_layers, 1280);
  EXPECT_NEAR(r.ms, 128.0, 1e-9);
  // On: layers 0-4 on all 128 rows (640); chunk 0 (no logits) layers 5-9: 64 + 62 + 47 + 32 + 0 = 205;
  // chunk 1 (its last row's logits): 64 + 62 + 47 + 32 + 1 = 206. 1051 row-layers x 0.1 = 105.1 ms.
  r = project_ttft(plan, t, {}, on);
  EXPECT_EQ(r.bounded_from, 5);
  EXPECT_EQ(r.row_layers, 1051);
  EXPECT_EQ(r.full_row_layers, 1280);
  EXPECT_NEAR(r.ms, 105.1, 1e-9);
  // P = 100: chunk 1 is 36 rows with logit row 35. Layer 9: 1 row, reads [min(36 - 32, 35 - 15), 36) = [4, 36);
  // layer 8: 32 rows, reads [max(0, 4 - 15), 36) = all; layers 5-7: 36 each. 1 + 32 + 3 * 36 = 141.
  // Layers 0-4: 5 x 100 = 500. 500 + 205 + 141 = 846 row-layers: 84.6 ms (off: 1000, 100 ms).
  on.prompt = off.prompt = 100;
  r = project_ttft(plan, t, {}, on);
  EXPECT_EQ(r.last_chunk_rows, 36);
  EXPECT_EQ(r.row_layers, 846);
  EXPECT_NEAR(r.ms, 84.6, 1e-9);
  EXPECT_NEAR(project_ttft(plan, t, {}, off).ms, 100.0, 1e-9);
}

// The released plans: V4.1's 4,096-row piece with its last row's logits computes 108,502 of 163,840
// row-layers (docs/replay.md); 0731 has no bounded layer, so replay on equals off.
TEST(TtftProjection, ReleasedPlans) {
  const ModelPlan v41 = build_plan(v41_flash_config());
  EXPECT_EQ(v41.n_layers, 40);
  const TtftProjection r = project_ttft(v41, {}, {}, {.prompt = 4096, .chunk = 4096, .bounded_replay = true,
                                                     .ring_capacity = 256});
  EXPECT_EQ(r.bounded_from, 20);
  EXPECT_EQ(r.row_layers, 0);  // nothing measured: every layer missing, none counted
  EXPECT_EQ(r.missing_layers, 40);
  std::vector<RoleTime> t;
  for (const RoleLayer& x : plan_roles(v41)) t.push_back({x.role, 4096, 0, 1.0});
  const TtftProjection m = project_ttft(v41, t, {}, {.prompt = 4096, .chunk = 4096, .bounded_replay = true,
                                                     .ring_capacity = 256});
  EXPECT_EQ(m.row_layers, 108502);
  EXPECT_EQ(m.full_row_layers, 163840);
  const ModelPlan v4 = build_plan(v4_flash_0731_config());
  EXPECT_EQ(v4.n_layers, 43);
  std::vector<RoleTime> u;
  for (const RoleLayer& x : plan_roles(v4)) u.push_back({x.role, 2048, 0, 1.0});
  const TtftProjection b = project_ttft(v4, u, {}, {.prompt = 4096, .chunk = 2048, .bounded_replay = true,
                                                    .ring_capacity = 256});
  EXPECT_EQ(b.bounded_from, -1);
  EXPECT_EQ(b.row_layers, 43 * 4096);
  EXPECT_DOUBLE_EQ(b.ms, 86.0);  // 43 layers x 2 chunks x 1 ms
}

}  // namespace
}  // namespace dsv4::family
