// The Mia layout plan (formats.md §1.12) for the tiny and release configs, the pack check's messages,
// the pack config round trip and the built-in release shard record (model-spec.md §5.5).
#include "family/deepseek_v41/exl3_layout.h"

#include <gtest/gtest.h>

#include "family/deepseek_v41/exl3_sources.h"
#include "family/deepseek_v41/preset.h"

namespace dsv4::family {
namespace {

const TensorSpec& spec(const Exl3PackPlan& p, const std::string& name) {
  const TensorSpec* t = p.release.find(name);
  EXPECT_NE(t, nullptr) << name;
  return *t;
}

TEST(Exl3Layout, StorageOfReleaseTensors) {
  auto plan = exl3_pack_plan(preset_config(Preset::tiny, Variant::v41));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const auto s = [&](const std::string& n) { return pack_storage_of(spec(*plan, n)); };
  EXPECT_EQ(s("layers.3.attn.wq_a.weight"), PackStorage::exl3);
  EXPECT_EQ(s("layers.3.attn.wq_a.scale"), PackStorage::exl3);
  EXPECT_EQ(s("layers.3.attn.wo_a.weight"), PackStorage::exl3_sliced);
  EXPECT_EQ(s("layers.2.ffn.experts.7.w2.weight"), PackStorage::exl3);
  EXPECT_EQ(s("layers.2.attn.compressor.wkv.weight"), PackStorage::exl3);
  EXPECT_EQ(s("head.weight"), PackStorage::exl3);
  EXPECT_EQ(s("mtp.0.main_proj.weight"), PackStorage::exl3);
  EXPECT_EQ(s("layers.1.engram.wkv.weight"), PackStorage::exl3);
  EXPECT_EQ(s("layers.1.engram.embed.weight"), PackStorage::release_shards);
  EXPECT_EQ(s("layers.1.engram.embed.scale"), PackStorage::release_shards);
  EXPECT_EQ(s("layers.1.engram.q_weight"), PackStorage::native);
  EXPECT_EQ(s("layers.3.ffn.gate.bias_vl"), PackStorage::absent);
  EXPECT_EQ(s("layers.3.ffn.gate.weight"), PackStorage::native);
  EXPECT_EQ(s("layers.3.ffn.gate.bias"), PackStorage::native);
  EXPECT_EQ(s("layers.2.attn.indexer.weights_proj.weight"), PackStorage::native);
  EXPECT_EQ(s("mtp.2.markov_head.head.weight"), PackStorage::native);
  EXPECT_EQ(s("embed.weight"), PackStorage::native);
  EXPECT_EQ(s("layers.0.hc_attn_fn"), PackStorage::native);
  EXPECT_EQ(s("vision.blocks.0.attn.wqkv.weight"), PackStorage::native_optional);
  EXPECT_EQ(s("image_start"), PackStorage::native_optional);
}

TEST(Exl3Layout, TinyGroupsArePaddedAndWoAIsSliced) {
  // tiny: D 256, 4 heads x 128, o_groups 2, o_lora 64, moe_intermediate 64 (preset.cc).
  auto plan = exl3_pack_plan(preset_config(Preset::tiny, Variant::v41));
  ASSERT_TRUE(plan.ok());
  const Exl3Group* s1 = plan->find_group("layers.0.attn.wo_a.slice.1");
  ASSERT_NE(s1, nullptr);
  EXPECT_EQ(s1->release, "layers.0.attn.wo_a");
  EXPECT_EQ(s1->slice, 1);
  EXPECT_EQ(s1->in, 256);  // H*d/G
  EXPECT_EQ(s1->out, 64);  // O
  EXPECT_EQ(s1->out_padded, 128);
  EXPECT_EQ(plan->find_group("layers.0.attn.wo_a.slice.2"), nullptr);
  EXPECT_EQ(plan->find_group("layers.0.attn.wo_a"), nullptr);
  EXPECT_EQ(plan->groups_of("layers.0.attn.wo_a").size(), 2u);
  const Exl3Group* w2 = plan->find_group("layers.2.ffn.experts.5.w2");
  ASSERT_NE(w2, nullptr);
  EXPECT_EQ(w2->in, 64);
  EXPECT_EQ(w2->in_padded, 128);
  EXPECT_EQ(w2->out, 256);
  const Exl3Group* head = plan->find_group("head");
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->in, 256);
  EXPECT_EQ(head->out, 129280);
}

TEST(Exl3Layout, ReleaseWoASlicesAreFourThousandByOneThousand) {
  // formats.md §1.12: wo_a [8192, 4096] is stored as 8 separate [K=4096, N=1024] linears.
  auto plan = exl3_pack_plan(preset_config(Preset::full, Variant::v41));
  ASSERT_TRUE(plan.ok());
  for (int g = 0; g < 8; ++g) {
    const Exl3Group* s = plan->find_group("layers.20.attn.wo_a.slice." + std::to_string(g));
    ASSERT_NE(s, nullptr) << g;
    EXPECT_EQ(s->in, 4096);
    EXPECT_EQ(s->out, 1024);
  }
  EXPECT_EQ(plan->find_group("layers.20.attn.wo_a.slice.8"), nullptr);
}

TEST(Exl3Layout, V4PacksAreRefusedByName) {
  auto plan = exl3_pack_plan(preset_config(Preset::tiny, Variant::v4));
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("v4-0731"), std::string::npos) << plan.status().to_string();
}

// The tensors of a well-formed pack for the plan, all in one file.
std::vector<FoundTensor> well_formed(const Exl3PackPlan& p) {
  std::vector<FoundTensor> f;
  for (const Exl3Group& g : p.groups) {
    f.push_back({g.prefix + ".trellis", DType::i16, {g.in_padded / 16, g.out_padded / 16, 64}, "m.safetensors"});
    f.push_back({g.prefix + ".suh", DType::f16, {g.in_padded}, "m.safetensors"});
    f.push_back({g.prefix + ".svh", DType::f16, {g.out_padded}, "m.safetensors"});
    f.push_back({g.prefix + ".mul1", DType::i32, {}, "m.safetensors"});
  }
  for (size_t i : p.native) f.push_back({p.release.tensors[i].name, p.release.tensors[i].dtype, p.release.tensors[i].shape, "m.safetensors"});
  return f;
}

TEST(Exl3Layout, PackCheckNamesEveryProblemWithItsFile) {
  auto plan = exl3_pack_plan(preset_config(Preset::tiny, Variant::v41));
  ASSERT_TRUE(plan.ok());
  std::vector<FoundTensor> f = well_formed(*plan);
  EXPECT_TRUE(validate_exl3_pack(*plan, f).ok()) << validate_exl3_pack(*plan, f).to_string();
  std::vector<FoundTensor> bad;
  for (const FoundTensor& t : f) {
    if (t.name == "layers.3.attn.wq_b.trellis") continue;  // missing
    bad.push_back(t);
    if (t.name == "layers.2.ffn.experts.1.w1.suh") bad.back().shape = {255};
    if (t.name == "layers.0.attn.wkv.trellis") bad.back().shape[2] = 144;  // 9 bits
  }
  bad.push_back({"layers.1.engram.embed.weight", DType::f8_e4m3, {spec(*plan, "layers.1.engram.embed.weight").shape},
                 "x.safetensors"});
  bad.push_back({"layers.0.attn.wq_a.mcg", DType::i32, {}, "m.safetensors"});  // beside .mul1
  bad.push_back({"bogus.tensor", DType::f32, {3}, "y.safetensors"});
  bad.push_back({"vision.norm.weight", DType::bf16, {64}, "m.safetensors"});  // one of the optional set alone
  const Status st = validate_exl3_pack(*plan, bad);
  ASSERT_FALSE(st.ok());
  const std::string m = st.message();
  for (const char* want : {"missing: layers.3.attn.wq_b.trellis", "wrong: layers.2.ffn.experts.1.w1.suh: F16 [255]",
                           "layers.0.attn.wkv.trellis", "unexpected: layers.1.engram.embed.weight", "in x.safetensors",
                           "layers.0.attn.wq_a.mcg and layers.0.attn.wq_a.mul1", "unexpected: bogus.tensor",
                           "in y.safetensors", "incomplete:"})
    EXPECT_NE(m.find(want), std::string::npos) << want << "\n" << m;
}

TEST(Exl3Layout, TensorStorageIsCrossChecked) {
  auto plan = exl3_pack_plan(preset_config(Preset::tiny, Variant::v41));
  ASSERT_TRUE(plan.ok());
  const std::vector<FoundTensor> f = well_formed(*plan);  // every trellis 64 words per tile: 4 bits, mul1
  exl3::QuantConfig q;
  for (const Exl3Group& g : plan->groups) {
    exl3::ModuleStorage m;
    m.exl3 = true;
    m.bits_per_weight = 4;
    m.codebook = exl3::Codebook::mul1;
    m.stored_tensors[g.prefix + ".suh"] = {{g.in_padded}, 2 * g.in_padded, "torch.float16"};
    q.tensor_storage[g.prefix] = m;
  }
  EXPECT_TRUE(validate_tensor_storage(*plan, q, f).ok());
  q.tensor_storage["layers.3.attn.wq_b"].bits_per_weight = 5;
  q.tensor_storage["layers.2.ffn.experts.0.w1"].codebook = exl3::Codebook::mcg;
  q.tensor_storage["head"].stored_tensors["head.suh"].shape = {512};
  q.tensor_storage.erase("layers.0.attn.wkv");
  const Status st = validate_tensor_storage(*plan, q, f);
  ASSERT_FALSE(st.ok());
  for (const char* want : {"layers.3.attn.wq_b: tensor_storage bits_per_weight 5, the trellis has 4",
                           "layers.2.ffn.experts.0.w1: tensor_storage codebook mcg, the tensors' marker says mul1",
                           "head.suh: tensor_storage shape [512], the pack has [256]",
                           "layers.0.attn.wkv: not in tensor_storage"})
    EXPECT_NE(st.message().find(want), std::string::npos) << want << "\n" << st.message();
}

TEST(Exl3Layout, PackConfigRoundTrips) {
  const Config c = preset_config(Preset::tiny, Variant::v41);
  exl3::QuantConfig q;
  q.version = "1.4.1";
  q.bits = 2.9;
  q.head_bits = 6;
  q.mtp_bits = 4;
  q.out_scales = "always";
  q.codebook = exl3::Codebook::mul1;
  const std::string text = exl3_pack_config_json(c, q);
  EXPECT_TRUE(is_exl3_config_text(text));
  EXPECT_FALSE(is_exl3_config_text(config_to_json(c)));
  auto p = parse_exl3_pack_config(text);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(config_to_json(p->config), config_to_json(c));
  EXPECT_EQ(p->quant.bits, 2.9);
  EXPECT_EQ(p->quant.codebook, exl3::Codebook::mul1);
  EXPECT_EQ(p->quant.mtp_bits, 4);
  // Without original_quantization_config the V4.1 release's FP8 settings apply.
  std::string stripped = text;
  const size_t at = stripped.find("\"original_quantization_config\"");
  ASSERT_NE(at, std::string::npos);
  stripped.replace(at, 1, "\"x_");  // renames the key, so it is ignored
  auto p2 = parse_exl3_pack_config(stripped);
  ASSERT_TRUE(p2.ok()) << p2.status().to_string();
  EXPECT_EQ(p2->config.quant.weight_block_in, 32);
}

TEST(Exl3Layout, ReleaseShardRecord) {
  // model-spec.md §5.5: shards 47/48 hold the layer 1 and 14 tables, files of 101,535,150,936 and
  // 101,537,926,640 bytes; no SHA-256 of them is in the reference documents.
  const Config full = preset_config(Preset::full, Variant::v41);
  const TensorTable t = expected_tensors(full);
  auto s = engram_sources_for("/nonexistent-pack", full, t);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_EQ(s->shards.size(), 2u);
  EXPECT_EQ(s->shards[0].file, "model-00047-of-00048.safetensors");
  EXPECT_EQ(s->shards[0].bytes, 101535150936);
  EXPECT_EQ(s->shards[1].file, "model-00048-of-00048.safetensors");
  EXPECT_EQ(s->shards[1].bytes, 101537926640);
  EXPECT_TRUE(s->shards[0].sha256.empty());
  const Config tiny = preset_config(Preset::tiny, Variant::v41);
  auto none = engram_sources_for("/nonexistent-pack", tiny, expected_tensors(tiny));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("engram_shards.json"), std::string::npos);
  auto rt = parse_engram_sources(engram_sources_json(*s), "x");
  ASSERT_TRUE(rt.ok());
  EXPECT_EQ(rt->shards[1].tensors, s->shards[1].tensors);
}

}  // namespace
}  // namespace dsv4::family
