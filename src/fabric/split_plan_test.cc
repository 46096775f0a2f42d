// The split plan partitions every tensor of the full V4.1-Flash and V4-Flash-0731 tables exactly, on whole
// quantization blocks, for TP 1, 2, 4 and 8 and both expert splits.
#include <gtest/gtest.h>

#include <cstdio>

#include "fabric/split_plan.h"
#include "family/deepseek_v41/preset.h"

namespace dsv4::fabric {
namespace {

using family::Preset;
using family::Variant;

struct Case {
  Variant variant;
  int32_t tp;
  ExpertSplit experts;
};

class SplitPlanTest : public ::testing::TestWithParam<Case> {};

TEST_P(SplitPlanTest, SlicesPartitionEveryTensorOnWholeBlocks) {
  const Case k = GetParam();
  const family::Config c = family::preset_config(Preset::full, k.variant);
  const family::TensorTable table = family::expected_tensors(c);
  auto plan = make_split_plan(c, table, k.tp, k.experts);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  ASSERT_EQ(plan->tensors.size(), table.tensors.size());
  int64_t replicated = 0, once = 0;
  for (size_t i = 0; i < table.tensors.size(); ++i) {
    const family::TensorSpec& t = table.tensors[i];
    const TensorSplit& s = plan->tensors[i];
    ASSERT_EQ(s.name, t.name);
    ASSERT_EQ(s.ranks.size(), static_cast<size_t>(k.tp)) << t.name;
    if (s.kind == SplitKind::split) {
      // Consecutive, non-empty, equal ranges covering [0, extent) exactly once.
      const int64_t extent = t.shape[static_cast<size_t>(s.dim)];
      int64_t at = 0;
      for (const Slice& r : s.ranks) {
        EXPECT_EQ(r.begin, at) << t.name;
        EXPECT_EQ(r.end - r.begin, extent / k.tp) << t.name;
        at = r.end;
      }
      EXPECT_EQ(at, extent) << t.name;
      // Whole quantization blocks: an FP8 weight's cut is a multiple of its tile side; a scale tensor
      // is cut at the matching tile index (checked through the pair below); a packed FP4 weight's K cut is a
      // multiple of 16 bytes = 32 codes = one scale group.
      const int64_t step = extent / k.tp;
      if (t.role == family::TensorRole::fp8_weight) {
        const int64_t block = s.dim == 0 ? c.quant.weight_block_out : c.quant.weight_block_in;
        EXPECT_EQ(step % block, 0) << t.name;
      }
      if (t.role == family::TensorRole::fp4_weight && s.dim == 1) EXPECT_EQ(step % 16, 0) << t.name;
      once += t.bytes();
    } else if (s.kind == SplitKind::owned) {
      int holders = 0;
      for (const Slice& r : s.ranks) holders += r.holds() ? 1 : 0;
      EXPECT_EQ(holders, 1) << t.name;
      once += t.bytes();
    } else if (s.kind == SplitKind::replicated) {
      for (const Slice& r : s.ranks) EXPECT_TRUE(r.holds()) << t.name;
      replicated += t.bytes();
    }
  }
  // A weight and its scale are cut at the same place: weight cut / tile == scale cut.
  for (size_t i = 0; i < table.tensors.size(); ++i) {
    const family::TensorSpec& t = table.tensors[i];
    if (t.role != family::TensorRole::fp8_scale && t.role != family::TensorRole::fp4_scale) continue;
    const std::string w = t.name.substr(0, t.name.size() - 6) + ".weight";
    const size_t wi = table.by_name.at(w);
    const TensorSplit& ss = plan->tensors[i];
    const TensorSplit& ws = plan->tensors[wi];
    ASSERT_EQ(ss.kind, ws.kind) << t.name;
    ASSERT_EQ(ss.dim, ws.dim) << t.name;
    if (ss.kind != SplitKind::split) continue;
    // Elements per scale entry along the cut dimension: FP8 tiles, or 16 packed FP4 bytes along K.
    int64_t per = 0;
    if (t.role == family::TensorRole::fp8_scale) per = ss.dim == 0 ? c.quant.weight_block_out : c.quant.weight_block_in;
    else per = ss.dim == 1 ? 16 : 1;
    for (int32_t r = 0; r < k.tp; ++r)
      EXPECT_EQ(ss.ranks[r].begin * per, ws.ranks[r].begin) << t.name << " rank " << r;
  }
  // Device bytes over all ranks = every split/owned byte once + every replicated byte on each rank.
  int64_t sum = 0;
  for (int32_t r = 0; r < k.tp; ++r) sum += rank_device_bytes(*plan, table, r);
  EXPECT_EQ(sum, once + replicated * k.tp);
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (Variant v : {Variant::v41, Variant::v4})
    for (int32_t tp : {1, 2, 4, 8})
      for (ExpertSplit e : {ExpertSplit::tp_intermediate, ExpertSplit::expert_parallel}) out.push_back({v, tp, e});
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllSizes, SplitPlanTest, ::testing::ValuesIn(cases()), [](const auto& info) {
  return std::string(info.param.variant == Variant::v41 ? "v41" : "v4") + "_tp" + std::to_string(info.param.tp) +
         "_" + expert_split_name(info.param.experts);
});

TEST(SplitPlan, HeadsAndOutputGroupsLineUpAtTp4) {
  // model-spec: 64 heads x 512, 8 output groups of rank 1024, experts 384 x 2304, vocab 129280.
  const family::Config c = family::preset_config(Preset::full, Variant::v41);
  const family::TensorTable table = family::expected_tensors(c);
  auto plan = make_split_plan(c, table, 4, ExpertSplit::tp_intermediate);
  ASSERT_TRUE(plan.ok());
  const auto find = [&](const std::string& n) { return plan->tensors[table.by_name.at(n)]; };
  // Rank 1 holds heads 16..31: wq_b rows 16*512 .. 32*512; sinks 16..31.
  EXPECT_EQ(find("layers.3.attn.wq_b.weight").ranks[1].begin, 16 * 512);
  EXPECT_EQ(find("layers.3.attn.wq_b.weight").ranks[1].end, 32 * 512);
  EXPECT_EQ(find("layers.3.attn.attn_sink").ranks[1].begin, 16);
  // ...and groups 2..3 (8 heads per group): wo_a rows 2*1024 .. 4*1024; wo_b reads every group (whole).
  EXPECT_EQ(find("layers.3.attn.wo_a.weight").ranks[1].begin, 2 * 1024);
  EXPECT_EQ(find("layers.3.attn.wo_a.weight").ranks[1].end, 4 * 1024);
  EXPECT_EQ(find("layers.3.attn.wo_b.weight").kind, SplitKind::replicated);
  EXPECT_EQ(find("layers.3.ffn.shared_experts.w2.weight").kind, SplitKind::replicated);
  // Expert intermediate 2304 / 4 = 576 rows of w1; w2 columns 576 / 2 = 288 packed bytes.
  EXPECT_EQ(find("layers.3.ffn.experts.7.w1.weight").ranks[3].begin, 3 * 576);
  EXPECT_EQ(find("layers.3.ffn.experts.7.w2.weight").ranks[1].begin, 288);
  EXPECT_EQ(find("layers.3.ffn.experts.7.w2.scale").ranks[1].begin, 576 / 32);
  // Vocabulary 129280 / 4 = 32320 rows of the head per rank.
  EXPECT_EQ(find("head.weight").ranks[2].begin, 2 * 32320);
  // Replicated: the latent, the indexer, the router.
  EXPECT_EQ(find("layers.3.attn.wkv.weight").kind, SplitKind::replicated);
  EXPECT_EQ(find("layers.3.ffn.gate.weight").kind, SplitKind::replicated);
}

TEST(SplitPlan, ExpertParallelGivesEachRankWholeExperts) {
  const family::Config c = family::preset_config(Preset::full, Variant::v41);
  const family::TensorTable table = family::expected_tensors(c);
  auto plan = make_split_plan(c, table, 8, ExpertSplit::expert_parallel);
  ASSERT_TRUE(plan.ok());
  // 384 experts / 8 ranks = 48 each: expert 100 lives on rank 2 (96..143).
  const TensorSplit& s = plan->tensors[table.by_name.at("layers.5.ffn.experts.100.w2.weight")];
  EXPECT_EQ(s.kind, SplitKind::owned);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(s.ranks[r].holds(), r == 2) << r;
}

TEST(SplitPlan, RefusesASizeThatCutsHeads) {
  const family::Config c = family::preset_config(Preset::full, Variant::v41);
  auto plan = make_split_plan(c, family::expected_tensors(c), 3, ExpertSplit::tp_intermediate);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("64 attention heads do not split over 3 ranks"), std::string::npos)
      << plan.status().to_string();
}

TEST(SplitPlan, PrintsDeviceBytesPerRank) {
  // Not an assertion on numbers: the per-rank weight memory that docs/fabric.md quotes.
  for (Variant v : {Variant::v41, Variant::v4}) {
    const family::Config c = family::preset_config(Preset::full, v);
    const family::TensorTable table = family::expected_tensors(c);
    for (int32_t tp : {1, 2, 4, 8}) {
      for (ExpertSplit e : {ExpertSplit::tp_intermediate, ExpertSplit::expert_parallel}) {
        auto plan = make_split_plan(c, table, tp, e);
        ASSERT_TRUE(plan.ok());
        std::printf("%s tp%d %-16s rank 0: %.2f GiB of device weights\n", v == Variant::v41 ? "V4.1" : "V4  ", tp,
                    expert_split_name(e), rank_device_bytes(*plan, table, 0) / 1073741824.0);
      }
    }
  }
}

}  // namespace
}  // namespace dsv4::fabric
