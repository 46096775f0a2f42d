// Per-rank weight bytes of the V4.1-Flash release against totals computed by hand from model-spec.md §5, §7.
#include "engine/weight_share.h"

#include <gtest/gtest.h>

#include <optional>

#include "family/deepseek_v41/preset.h"

namespace dsv4::engine {
namespace {

using family::Config;

StatusOr<WeightShare> share(const Config& c, int32_t tp, const std::vector<StoredTensor>* tensors, bool exl3,
                            bool drafter) {
  const family::TensorTable release = family::expected_tensors(c);
  auto plan = fabric::make_split_plan(c, release, tp, fabric::ExpertSplit::expert_parallel);
  if (!plan.ok()) return plan.status();
  std::optional<family::Exl3PackPlan> pack;
  if (exl3) pack = *family::exl3_pack_plan(c);
  return share_weights(c, release, *plan, tensors ? *tensors : release_tensors(release), pack ? &*pack : nullptr,
                       drafter);
}

// The hand computation (model-spec.md):
//   payload 510,286,023,000 B (§5.1); Engram tables + scales 202,758,032,400 (§7.3) stay on the host;
//   vision + aligner 970,506,240 (shard 1, §5.5) and the image delimiters 3 x 10,240 (shard 2) are not loaded;
//   attn.wo_a is held as bf16: per block FP8 [8192, 4096] 33,554,432 B + scale [256, 128] 32,768 B become
//   67,108,864 B, +33,521,664 for each of 40 layers and 3 DSpark stages = +1,441,431,552.
//   One GPU: 510,286,023,000 - 202,758,032,400 - 970,536,960 + 1,441,431,552 = 307,998,885,192.
// What splits over tp ranks (expert_parallel, fabric/split_plan.h), S:
//   routed experts 18,800,640 B each (§7.2): 40 x 384 + 3 x 128 (DSpark) = 15,744 experts = 295,997,276,160;
//   embed and head, bf16 [129280, 5120], 1,323,827,200 each (§5.4) = 2,647,654,400;
//   per block wq_b FP8 [32768, 1280] 41,943,040 + scale [1024, 40] 40,960, attn_sink f32 [64] 256,
//   wo_a (bf16) 67,108,864: 109,093,120 x 43 = 4,691,004,160;
//   S = 303,335,934,720; the rest R = 307,998,885,192 - S = 4,662,950,472 is on every rank (the Markov head's
//   embedding and head included: kept whole, fabric/rank_weights.h). Each rank of tp holds R + S / tp.
constexpr int64_t kOneGpu = 307998885192, kSplit = 303335934720, kWhole = 4662950472;

TEST(WeightShare, V41ReleaseByHand) {
  const Config c = family::v41_flash_config();
  for (int32_t tp : {1, 2, 4, 8}) {
    SCOPED_TRACE(tp);
    auto s = share(c, tp, nullptr, false, true);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_EQ(s->stored, 510286023000);
    EXPECT_EQ(s->host_engram, 202758032400);
    EXPECT_EQ(s->not_loaded, 970536960);
    ASSERT_EQ(s->rank_device.size(), static_cast<size_t>(tp));
    for (int64_t b : s->rank_device) EXPECT_EQ(b, kWhole + kSplit / tp);
  }
  EXPECT_EQ(kWhole + kSplit, kOneGpu);
}

// Without the drafter the three DSpark shards (§5.5: 2,652,643,800 + 2,573,913,560 + 2,706,317,272 =
// 7,932,874,632 B) are not loaded, and their wo_a widening (3 x 33,521,664) goes with them.
TEST(WeightShare, V41WithoutDrafter) {
  auto s = share(family::v41_flash_config(), 1, nullptr, false, false);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->not_loaded, 970536960);
  EXPECT_EQ(s->drafter_not_loaded, 7932874632);
  EXPECT_EQ(s->rank_device[0], kOneGpu - 7932874632 - 3 * 33521664);
  EXPECT_EQ(s->rank_drafter[0], 0);
  auto on = share(family::v41_flash_config(), 1, nullptr, false, true);
  EXPECT_EQ(on->rank_drafter[0], 7932874632 + 3 * 33521664);
}

// EXL3 placement rules on made-up sizes (weight_share.h): at TP 4 a vocabulary slice of 32,320 rows is not on
// 128-column blocks, so the head stays whole on every rank; at TP 2 (64,640 = 505 x 128) it is cut.
TEST(WeightShare, Exl3PlacementRules) {
  const Config c = family::v41_flash_config();
  const std::vector<StoredTensor> t = {
      {"head.trellis", 1000},
      {"head.suh", 10},
      {"head.svh", 100},
      {"layers.0.ffn.experts.200.w1.trellis", 800},  // expert 200: rank 2 of 4 (96 each), rank 1 of 2
      {"layers.0.attn.wo_a.slice.5.trellis", 64},    // output group 5 of 8: rank 2 of 4, rank 1 of 2
      {"layers.0.attn.wq_b.trellis", 4000},          // heads: cut on 128-column blocks
      {"layers.0.attn.wq_b.suh", 40},                // input signs: whole on every rank
      {"layers.0.attn_norm.weight", 7},              // native, replicated
      {"mtp.2.markov_head.head.weight", 12},         // kept whole on every rank
      {"layers.1.engram.embed.weight", 1 << 20},     // host
      {"vision.blocks.0.attn.wo.weight", 5},         // not loaded
      {"layers.0.attn.wq_a.weight", 9},              // a pack's unused copy of an EXL3 linear's weight
  };
  auto s4 = share(c, 4, &t, true, true);
  ASSERT_TRUE(s4.ok()) << s4.status().to_string();
  const int64_t every4 = 1000 + 10 + 100 + 1000 + 40 + 7 + 12;
  EXPECT_EQ(s4->rank_device, (std::vector<int64_t>{every4, every4, every4 + 800 + 64, every4}));
  EXPECT_EQ(s4->rank_drafter, (std::vector<int64_t>{12, 12, 12, 12}));
  EXPECT_EQ(s4->host_engram, 1 << 20);
  EXPECT_EQ(s4->not_loaded, 5 + 9);
  auto s2 = share(c, 2, &t, true, true);
  ASSERT_TRUE(s2.ok()) << s2.status().to_string();
  const int64_t every2 = 500 + 10 + 50 + 2000 + 40 + 7 + 12;
  EXPECT_EQ(s2->rank_device, (std::vector<int64_t>{every2, every2 + 800 + 64}));
}

TEST(WeightShare, RefusesUnknownTensors) {
  const std::vector<StoredTensor> t = {{"layers.0.attn.not_a_thing", 1}};
  auto s = share(family::v41_flash_config(), 1, &t, false, true);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("layers.0.attn.not_a_thing"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::engine
