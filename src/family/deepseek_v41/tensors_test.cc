// Tensor table totals vs the real releases (model-spec.md §5.1, §5.3, §5.5, §7.2, §8) and validate_tensors.
#include "family/deepseek_v41/tensors.h"

#include <gtest/gtest.h>

#include "family/deepseek_v41/preset.h"

namespace dsv4::family {
namespace {

TEST(Tensors, V41FlashTotalsMatchRelease) {
  const TensorTable t = expected_tensors(v41_flash_config());
  // model-spec.md §5.1 ([KJ] measured).
  EXPECT_EQ(t.tensors.size(), 96085u);
  EXPECT_EQ(t.total_bytes(), 510286023000);
  EXPECT_EQ(t.num_shards, 48);
  const auto by = t.bytes_by_dtype();
  EXPECT_EQ(by.at(DType::bf16), 3952883712);
  EXPECT_EQ(by.at(DType::f32), 169229128);
  EXPECT_EQ(by.at(DType::f8_e4m3), 204015223296);
  EXPECT_EQ(by.at(DType::f8_e8m0), 23563015184);
  EXPECT_EQ(by.at(DType::i8), 278585671680);
  EXPECT_EQ(by.size(), 5u);
}

TEST(Tensors, V41FlashShardPayloadsMatchShardMap) {
  const TensorTable t = expected_tensors(v41_flash_config());
  std::vector<int64_t> payload(t.num_shards + 1, 0), count(t.num_shards + 1, 0);
  for (const auto& s : t.tensors) payload[s.shard] += s.bytes(), count[s.shard]++;
  // model-spec.md §5.5.
  EXPECT_EQ(payload[1], 970506240);
  EXPECT_EQ(count[1], 263);
  EXPECT_EQ(payload[2], 1323857920);
  EXPECT_EQ(payload[3], 7389500888);   // layer 0
  EXPECT_EQ(count[3], 2334);
  EXPECT_EQ(payload[4], 7389500888);   // layer 1 without engram.*
  EXPECT_EQ(payload[5], 7405694680);   // layer 2
  EXPECT_EQ(count[5], 2342);
  EXPECT_EQ(payload[23], 7400451800);  // layer 20
  EXPECT_EQ(count[23], 2341);
  EXPECT_EQ(payload[27], 7395076568);  // layer 24
  EXPECT_EQ(count[27], 2337);
  EXPECT_EQ(payload[43], 1323837440);
  EXPECT_EQ(payload[44], 2652643800);
  EXPECT_EQ(count[44], 801);
  EXPECT_EQ(payload[45], 2573913560);
  EXPECT_EQ(count[45], 798);
  EXPECT_EQ(payload[46], 2706317272);
  EXPECT_EQ(count[46], 802);
  EXPECT_EQ(payload[47], 101535150272);
  EXPECT_EQ(payload[48], 101537925968);
  EXPECT_EQ(t.shard_file(3), "model-00003-of-00048.safetensors");
}

TEST(Tensors, V41LayerOneRowsMatchSpec) {
  const TensorTable t = expected_tensors(v41_flash_config());
  struct Row { const char* name; DType dt; std::vector<int64_t> shape; };
  // A sample of model-spec.md §5.3 / §5.4 rows.
  for (const Row& r : {Row{"layers.1.attn.wo_a.scale", DType::f8_e8m0, {256, 128}},
                       Row{"layers.1.attn.wq_b.weight", DType::f8_e4m3, {32768, 1280}},
                       Row{"layers.1.engram.embed.scale", DType::f8_e8m0, {384006168, 8}},
                       Row{"layers.1.engram.wkv.weight", DType::f8_e4m3, {25600, 6144}},
                       Row{"layers.1.engram.wkv.scale", DType::f8_e8m0, {800, 192}},
                       Row{"layers.1.ffn.experts.383.w2.weight", DType::i8, {5120, 1152}},
                       Row{"layers.1.ffn.experts.0.w1.scale", DType::f8_e8m0, {2304, 160}},
                       Row{"layers.1.hc_ffn_fn", DType::f32, {24, 20480}},
                       Row{"layers.14.engram.embed.weight", DType::f8_e4m3, {384016682, 256}},
                       Row{"layers.20.attn.indexer.wq_b.scale", DType::f8_e8m0, {128, 40}},
                       Row{"mtp.0.main_proj.scale", DType::f8_e8m0, {160, 480}},
                       Row{"mtp.2.confidence_head.proj.weight", DType::bf16, {1, 5376}},
                       Row{"mtp.2.markov_head.head.weight", DType::bf16, {129280, 256}},
                       Row{"vision.blocks.31.mlp.w1.weight", DType::bf16, {5632, 1024}}}) {
    const TensorSpec* s = t.find(r.name);
    ASSERT_NE(s, nullptr) << r.name;
    EXPECT_EQ(s->dtype, r.dt) << r.name;
    EXPECT_EQ(s->shape, r.shape) << r.name;
  }
  EXPECT_EQ(t.find("layers.20.attn.compressor.wgate.weight"), nullptr);
  EXPECT_EQ(t.find("layers.24.attn.indexer.wk.weight"), nullptr);
  EXPECT_EQ(t.find("layers.3.attn.indexer.wq_b.weight"), nullptr);
  EXPECT_EQ(t.find("layers.1.engram.embed.weight")->shard, 47);
}

TEST(Tensors, V4Flash0731TotalsMatchRelease) {
  const TensorTable t = expected_tensors(v4_flash_0731_config());
  // model-spec.md §1 / §8 ([OT-REL]).
  EXPECT_EQ(t.tensors.size(), 72317u);
  EXPECT_EQ(t.total_bytes(), 166878536440);
  EXPECT_EQ(t.num_shards, 48);
  EXPECT_EQ(t.find("embed.weight")->shard, 1);
  EXPECT_EQ(t.find("layers.0.ffn.gate.tid2eid")->shard, 2);
  EXPECT_EQ(t.find("hc_head_fn")->shard, 45);
  EXPECT_EQ(t.find("mtp.2.markov_head.markov_w2.weight")->shard, 48);
  // §8 per-layer rows.
  EXPECT_EQ(t.find("layers.2.attn.compressor.ape")->shape, (std::vector<int64_t>{4, 1024}));
  EXPECT_EQ(t.find("layers.3.attn.compressor.ape")->shape, (std::vector<int64_t>{128, 512}));
  EXPECT_EQ(t.find("layers.2.attn.indexer.wq_b.scale")->shape, (std::vector<int64_t>{64, 8}));
  EXPECT_EQ(t.find("layers.5.attn.wo_b.scale")->shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(t.find("layers.5.ffn.experts.255.w2.scale")->shape, (std::vector<int64_t>{4096, 64}));
  EXPECT_EQ(t.find("mtp.0.main_proj.weight")->shape, (std::vector<int64_t>{4096, 12288}));
  EXPECT_EQ(t.find("mtp.2.confidence_head.proj.weight")->shape, (std::vector<int64_t>{1, 4352}));
  EXPECT_EQ(t.find("layers.3.ffn.gate.tid2eid"), nullptr);
  EXPECT_EQ(t.find("layers.3.attn.indexer.wq_b.weight"), nullptr);
}

TEST(Tensors, V41WeightBytesPerToken) {
  // model-spec.md §7.2: the eight listed components sum to 13,034,245,568; the "norms, embed row,
  // Engram rows" line is 40*2*10,240 + 10,240 (final norm) + 10,240 (embed row) + 2*24*264 = 852,352.
  const Config c = v41_flash_config();
  EXPECT_EQ(weight_bytes_per_token(c, expected_tensors(c)), 13034245568 + 852352);
}

TEST(Tensors, V41ResidentSizes) {
  // model-spec.md §7.3.
  const ResidentSizes r = resident_sizes(expected_tensors(v41_flash_config()));
  EXPECT_EQ(r.total, 510286023000);
  EXPECT_EQ(r.without_engram, 307527990600);
  EXPECT_EQ(r.total - r.without_engram, 202758032400);
  EXPECT_EQ(r.text_backbone, 298624579008);
}

TEST(Tensors, ValidateListsEveryProblem) {
  const Config c = preset_config(Preset::tiny, Variant::v41);
  const TensorTable t = expected_tensors(c);
  std::vector<FoundTensor> found;
  for (const auto& s : t.tensors) found.push_back({s.name, s.dtype, s.shape, t.shard_file(s.shard)});
  ASSERT_TRUE(validate_tensors(t, found).ok());
  // U8 in place of F8_E8M0 is accepted.
  for (auto& f : found)
    if (f.dtype == DType::f8_e8m0) f.dtype = DType::u8;
  EXPECT_TRUE(validate_tensors(t, found).ok());
  // Break four things at once.
  auto at = [&](const char* n) -> FoundTensor& {
    for (auto& f : found)
      if (f.name == n) return f;
    throw std::runtime_error(n);
  };
  at("layers.2.attn.wq_a.weight").dtype = DType::bf16;
  at("layers.3.ffn.gate.weight").shape = {7, 256};
  found.erase(std::find_if(found.begin(), found.end(), [](auto& f) { return f.name == "head.weight"; }));
  found.erase(std::find_if(found.begin(), found.end(), [](auto& f) { return f.name == "mtp.1.attn.attn_sink"; }));
  found.push_back({"layers.0.bogus", DType::f32, {1}, "x.safetensors"});
  const Status s = validate_tensors(t, found);
  ASSERT_FALSE(s.ok());
  const std::string& m = s.message();
  EXPECT_NE(m.find("2 missing, 1 unexpected, 2 mis-typed or mis-shaped"), std::string::npos) << m;
  EXPECT_NE(m.find("missing: head.weight"), std::string::npos) << m;
  EXPECT_NE(m.find("missing: mtp.1.attn.attn_sink"), std::string::npos) << m;
  EXPECT_NE(m.find("unexpected: layers.0.bogus"), std::string::npos) << m;
  EXPECT_NE(m.find("layers.2.attn.wq_a.weight: dtype BF16, expected F8_E4M3"), std::string::npos) << m;
  EXPECT_NE(m.find("layers.3.ffn.gate.weight: shape [7, 256], expected [8, 256]"), std::string::npos) << m;
}

}  // namespace
}  // namespace dsv4::family
