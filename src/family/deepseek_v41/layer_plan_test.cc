// Layer plan vs the role tables of model-spec.md §2.3 (V4.1) and §8 (V4-Flash-0731).
#include "family/deepseek_v41/layer_plan.h"

#include <gtest/gtest.h>

#include "family/deepseek_v41/preset.h"

namespace dsv4::family {
namespace {

TEST(LayerPlan, V41FlashMatchesSpecTable) {
  const ModelPlan plan = build_plan(v41_flash_config());
  ASSERT_EQ(plan.layers.size(), 40u);
  ASSERT_EQ(plan.dspark.size(), 3u);
  // model-spec.md §2.3, row by row.
  for (int l : {0, 1}) {
    EXPECT_EQ(plan.layers[l].attn, AttnKind::window_only) << l;
    EXPECT_EQ(plan.layers[l].compress_ratio, 0);
    EXPECT_EQ(plan.layers[l].rope_base, 10000);
    EXPECT_FALSE(plan.layers[l].yarn);
  }
  for (int l : {2, 8, 14}) {
    const LayerPlan& p = plan.layers[l];
    EXPECT_EQ(p.attn, AttnKind::full) << l;
    EXPECT_EQ(p.compress_ratio, 2);
    EXPECT_TRUE(p.kv_source && p.index_source && p.owns_index_keys && p.compressor_gate);
    EXPECT_FALSE(p.candidate_source);
    EXPECT_EQ(p.kv_from, l);
    EXPECT_EQ(p.topk_from, l);
  }
  const LayerPlan& l20 = plan.layers[20];
  EXPECT_EQ(l20.attn, AttnKind::full);
  EXPECT_EQ(l20.compress_ratio, 1);
  EXPECT_TRUE(l20.kv_source && l20.index_source && l20.candidate_source);
  EXPECT_FALSE(l20.compressor_gate);  // ratio 1: no wgate
  for (int l : {24, 28, 32, 36}) {
    const LayerPlan& p = plan.layers[l];
    EXPECT_EQ(p.attn, AttnKind::reindex) << l;
    EXPECT_TRUE(p.index_source && p.uses_candidates);
    EXPECT_FALSE(p.kv_source || p.owns_index_keys);
    EXPECT_EQ(p.kv_from, 20);
    EXPECT_EQ(p.index_keys_from, 20);
    EXPECT_EQ(p.candidate_from, 20);
    EXPECT_EQ(p.topk_from, l);
  }
  // Reuse layers read the newest KV source and the newest index source.
  struct Reuse { int first, last, kv, topk; };
  for (Reuse r : {Reuse{3, 7, 2, 2}, Reuse{9, 13, 8, 8}, Reuse{15, 19, 14, 14}, Reuse{21, 23, 20, 20},
                  Reuse{25, 27, 20, 24}, Reuse{29, 31, 20, 28}, Reuse{33, 35, 20, 32}, Reuse{37, 39, 20, 36}})
    for (int l = r.first; l <= r.last; ++l) {
      EXPECT_EQ(plan.layers[l].attn, AttnKind::reuse) << l;
      EXPECT_EQ(plan.layers[l].kv_from, r.kv) << l;
      EXPECT_EQ(plan.layers[l].topk_from, r.topk) << l;
    }
  for (int l = 2; l < 40; ++l) {
    EXPECT_EQ(plan.layers[l].compress_ratio, l < 20 ? 2 : 1) << l;
    EXPECT_EQ(plan.layers[l].rope_base, 160000) << l;
    EXPECT_TRUE(plan.layers[l].yarn);
  }
  for (int l = 0; l < 40; ++l) {
    EXPECT_EQ(plan.layers[l].engram, l == 1 || l == 14) << l;
    EXPECT_EQ(plan.layers[l].dspark_tap, l >= 37) << l;
    EXPECT_EQ(plan.layers[l].n_routed_experts, 384);
    EXPECT_FALSE(plan.layers[l].hash_routed);
  }
  EXPECT_EQ(plan.layers[14].engram_index, 1);
  for (int s = 0; s < 3; ++s) {
    const LayerPlan& p = plan.dspark[s];
    EXPECT_EQ(p.id, 40 + s);
    EXPECT_EQ(p.name(), "mtp." + std::to_string(s));
    EXPECT_EQ(p.attn, AttnKind::window_only);
    EXPECT_EQ(p.rope_base, 10000);
    EXPECT_FALSE(p.yarn);
    EXPECT_EQ(p.n_routed_experts, 128);
    EXPECT_EQ(p.num_experts_per_tok, 3);
  }
  EXPECT_EQ(plan.kv_cache_layers, (std::vector<int32_t>{2, 8, 14, 20}));
  EXPECT_EQ(plan.index_key_layers, (std::vector<int32_t>{2, 8, 14, 20}));
}

TEST(LayerPlan, V4Flash0731MatchesSpec) {
  const ModelPlan plan = build_plan(v4_flash_0731_config());
  ASSERT_EQ(plan.layers.size(), 43u);
  ASSERT_EQ(plan.dspark.size(), 3u);
  // model-spec.md §8: ratios [0,0,(4,128)x20,4]; ratio 4 = compressor + indexer; layers 0-2 hash-routed.
  for (int l = 0; l < 43; ++l) {
    const LayerPlan& p = plan.layers[l];
    const int want = l < 2 ? 0 : (l % 2 == 0 ? 4 : 128);
    EXPECT_EQ(p.compress_ratio, want) << l;
    EXPECT_EQ(p.attn, want == 0 ? AttnKind::window_only : want == 4 ? AttnKind::v4_csa : AttnKind::v4_hca);
    EXPECT_EQ(p.kv_source, want != 0);
    EXPECT_EQ(p.index_source, want == 4);
    EXPECT_EQ(p.compressor_overlap, want == 4);
    EXPECT_EQ(p.hash_routed, l < 3) << l;
    EXPECT_EQ(p.rope_base, want ? 160000 : 10000);
    EXPECT_FALSE(p.dspark_tap);  // the 0731 drafter is listed, not run (model-spec.md §10.7)
    EXPECT_FALSE(p.engram);
    EXPECT_EQ(p.n_routed_experts, 256);
  }
  for (const LayerPlan& p : plan.dspark) {
    EXPECT_EQ(p.attn, AttnKind::window_only);
    EXPECT_EQ(p.n_routed_experts, 256);
    EXPECT_EQ(p.num_experts_per_tok, 6);
    EXPECT_FALSE(p.hash_routed);
  }
  EXPECT_EQ(plan.dspark_stages, 0);
  EXPECT_TRUE(plan.dspark_target_layers.empty());
}

// The numerics the variants differ in, as the plan states them (model-spec.md §3.5, §4.2, §5, §8): what the
// backends read instead of the variant.
TEST(LayerPlan, NumericsOfEachVariant) {
  const ModelPlan v41 = build_plan(v41_flash_config()), v4 = build_plan(v4_flash_0731_config());
  EXPECT_EQ(v41.premix, HcPremix::carried);
  EXPECT_EQ(v4.premix, HcPremix::own);
  EXPECT_FALSE(v41.q_head_norm || v41.index_hadamard || v41.topk_by_score || v41.route_norm_always);
  EXPECT_TRUE(v4.q_head_norm && v4.index_hadamard && v4.topk_by_score && v4.route_norm_always);
  EXPECT_EQ(v41.router_eps, 1e-20f);
  EXPECT_EQ(v4.router_eps, 0.0f);
  EXPECT_EQ(v41.num_hash_layers, 0);
  EXPECT_EQ(v4.num_hash_layers, 3);
  EXPECT_EQ(v41.window_format, KvRowFormat::fp8_ue8m0_32);
  EXPECT_EQ(v41.compressed_format, KvRowFormat::fp4_e4m3_16);
  EXPECT_EQ(v4.window_format, KvRowFormat::model1);
  EXPECT_EQ(v4.compressed_format, KvRowFormat::model1);
  EXPECT_EQ(v41.index_format, KvRowFormat::fp4_ue8m0_32);
  EXPECT_EQ(v4.index_format, KvRowFormat::fp4_ue8m0_32);
  EXPECT_EQ(v41.act_block, 32);
  EXPECT_EQ(v4.act_block, 128);
  EXPECT_EQ(v41.dspark_stages, 3);
  EXPECT_EQ(v41.dspark_target_layers, (std::vector<int>{37, 38, 39}));
  for (const LayerPlan& p : v41.layers) EXPECT_FALSE(p.compressor_ape);
  for (const LayerPlan& p : v4.layers) EXPECT_EQ(p.compressor_ape, p.compress_ratio > 0);
  EXPECT_TRUE(check_plan(v41).ok());
  EXPECT_TRUE(check_plan(v4).ok());
  const ModelPlan plain = without_quantization(v41);
  EXPECT_EQ(plain.act_block, 0);
  EXPECT_EQ(plain.compressed_format, KvRowFormat::bf16);
}

// Candidates restrict an index source's scores only after the candidate source, and not at all without one.
TEST(LayerPlan, CandidatesOnlyAfterTheirSource) {
  Config c = v41_flash_config();
  for (const LayerPlan& p : build_plan(c).layers)
    EXPECT_EQ(p.uses_candidates, p.index_source && p.id > 20) << p.id;
  c.candidate_source_layer_id = -1;
  for (const LayerPlan& p : build_plan(c).layers) {
    EXPECT_FALSE(p.uses_candidates) << p.id;
    EXPECT_EQ(p.candidate_from, -1);
  }
}

TEST(LayerPlan, TinyV41ExercisesEveryRole) {
  const Config c = preset_config(Preset::tiny, Variant::v41);
  const ModelPlan plan = build_plan(c);
  int window = 0, full2 = 0, full1 = 0, reuse2 = 0, reuse1 = 0, reindex = 0, cand = 0, engram = 0;
  for (const LayerPlan& p : plan.layers) {
    window += p.attn == AttnKind::window_only;
    full2 += p.attn == AttnKind::full && p.compress_ratio == 2;
    full1 += p.attn == AttnKind::full && p.compress_ratio == 1;
    reuse2 += p.attn == AttnKind::reuse && p.compress_ratio == 2;
    reuse1 += p.attn == AttnKind::reuse && p.compress_ratio == 1;
    reindex += p.attn == AttnKind::reindex;
    cand += p.candidate_source;
    engram += p.engram;
  }
  EXPECT_GT(window, 0);
  EXPECT_GT(full2, 0);
  EXPECT_GT(full1, 0);
  EXPECT_GT(reuse2, 0);
  EXPECT_GT(reuse1, 0);
  EXPECT_GT(reindex, 0);
  EXPECT_EQ(cand, 1);
  EXPECT_EQ(engram, 2);
  EXPECT_EQ(plan.dspark.size(), 3u);
  // A reuse layer after a reindex layer takes the reindex layer's top-k.
  EXPECT_EQ(plan.layers[8].topk_from, 7);
}

TEST(LayerPlan, TinyV4HasHashCsaAndHca) {
  const ModelPlan plan = build_plan(preset_config(Preset::tiny, Variant::v4));
  int csa = 0, hca = 0, hash = 0;
  for (const LayerPlan& p : plan.layers) {
    csa += p.attn == AttnKind::v4_csa;
    hca += p.attn == AttnKind::v4_hca;
    hash += p.hash_routed;
  }
  EXPECT_GT(csa, 0);
  EXPECT_GT(hca, 0);
  EXPECT_EQ(hash, 3);
  EXPECT_EQ(plan.dspark.size(), 3u);
}

}  // namespace
}  // namespace dsv4::family
