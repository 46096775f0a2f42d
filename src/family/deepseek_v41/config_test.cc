// Config parsing of both release configs (fixtures from model-spec.md §2.1/§2.4), presets, refusals.
#include "family/deepseek_v41/config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "family/deepseek_v41/preset.h"

namespace dsv4::family {
namespace {

std::string read_fixture(const char* name) {
  std::ifstream in(std::string(DSV4_SOURCE_DIR "/tests/data/") + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Config, ParsesV41FlashNested) {
  auto c = parse_config(read_fixture("v41_flash_config.json"));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  // Expected values: model-spec.md §2.1 tables.
  EXPECT_EQ(c->variant, Variant::v41);
  EXPECT_EQ(c->vocab_size, 129280);
  EXPECT_EQ(c->hidden_size, 5120);
  EXPECT_EQ(c->num_hidden_layers, 40);
  EXPECT_EQ(c->num_dspark_stages(), 3);
  EXPECT_EQ(c->num_attention_heads, 64);
  EXPECT_EQ(c->head_dim, 512);
  EXPECT_EQ(c->qk_rope_head_dim, 64);
  EXPECT_EQ(c->q_lora_rank, 1280);
  EXPECT_EQ(c->o_lora_rank, 1024);
  EXPECT_EQ(c->o_groups, 8);
  EXPECT_EQ(c->rms_norm_eps, 1e-20);
  EXPECT_EQ(c->rope_scaling.type, "yarn");
  EXPECT_EQ(c->rope_scaling.factor, 16);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 65536);
  EXPECT_EQ(c->compress_rope_theta, 160000);
  EXPECT_EQ(c->compress_ratios.size(), 43u);
  EXPECT_EQ(c->compress_ratios[1], 0);
  EXPECT_EQ(c->compress_ratios[2], 2);
  EXPECT_EQ(c->compress_ratios[19], 2);
  EXPECT_EQ(c->compress_ratios[20], 1);
  EXPECT_EQ(c->compress_ratios[39], 1);
  EXPECT_EQ(c->kv_source_layer_ids, (std::vector<int32_t>{2, 8, 14, 20}));
  EXPECT_EQ(c->index_source_layer_ids, (std::vector<int32_t>{2, 8, 14, 20, 24, 28, 32, 36}));
  EXPECT_EQ(c->candidate_source_layer_id, 20);
  EXPECT_EQ(c->candidate_topk_blocks, 2048);
  EXPECT_EQ(c->candidate_block_size, 8);
  EXPECT_EQ(c->index_n_heads, 32);
  EXPECT_EQ(c->n_routed_experts, 384);
  EXPECT_EQ(c->num_experts_per_tok, 6);
  EXPECT_EQ(c->moe_intermediate_size, 2304);
  EXPECT_EQ(c->engram_layer_ids, (std::vector<int32_t>{1, 14}));
  EXPECT_EQ(c->engram_num_embeddings, (std::vector<int64_t>{384006168, 384016682}));
  EXPECT_EQ(c->engram_compressed_vocab_size, 99092);
  EXPECT_EQ(c->dspark_target_layer_ids, (std::vector<int32_t>{37, 38, 39}));
  EXPECT_EQ(c->dspark_n_routed_experts, 128);
  EXPECT_EQ(c->dspark_num_experts_per_tok, 3);
  EXPECT_EQ(c->quant.weight_block_out, 32);
  EXPECT_EQ(c->quant.expert_dtype, "fp4");
  EXPECT_EQ(c->image_token_id.value_or(-1), 129264);
  ASSERT_TRUE(c->vision.has_value());
  EXPECT_EQ(c->vision->hidden_size, 1024);
  EXPECT_EQ(c->vision->num_hidden_layers, 32);
  EXPECT_EQ(c->vision->intermediate_size, 2816);
  EXPECT_FALSE(c->vision->max_wh_ratio.has_value());
}

TEST(Config, ParsesV4Flash0731Flat) {
  auto c = parse_config(read_fixture("v4_flash_0731_config.json"));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  // Expected values: model-spec.md §2.4 (official 256 experts).
  EXPECT_EQ(c->variant, Variant::v4);
  EXPECT_EQ(c->hidden_size, 4096);
  EXPECT_EQ(c->num_hidden_layers, 43);
  EXPECT_EQ(c->num_nextn_predict_layers, 1);
  EXPECT_EQ(c->num_dspark_stages(), 3);
  EXPECT_EQ(c->q_lora_rank, 1024);
  EXPECT_EQ(c->index_n_heads, 64);
  EXPECT_EQ(c->n_routed_experts, 256);
  EXPECT_EQ(c->dspark_n_routed_experts, 256);
  EXPECT_EQ(c->dspark_num_experts_per_tok, 6);
  EXPECT_EQ(c->moe_intermediate_size, 2048);
  EXPECT_EQ(c->num_hash_layers, 3);
  EXPECT_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_EQ(c->quant.weight_block_out, 128);
  EXPECT_EQ(c->quant.fmt, "e4m3");
  EXPECT_EQ(c->quant.expert_dtype, "fp4");
  EXPECT_EQ(c->compress_ratios.size(), 46u);
  EXPECT_EQ(c->compress_ratios[2], 4);
  EXPECT_EQ(c->compress_ratios[3], 128);
  EXPECT_EQ(c->compress_ratios[42], 4);
  EXPECT_TRUE(c->engram_layer_ids.empty());
  EXPECT_FALSE(c->vision.has_value());
}

TEST(Config, ReleasePresetsEqualTheFixtures) {
  auto a = parse_config(read_fixture("v41_flash_config.json"));
  auto b = parse_config(read_fixture("v4_flash_0731_config.json"));
  ASSERT_TRUE(a.ok() && b.ok());
  // The written JSON of the preset parses back to what the fixture parses to.
  EXPECT_EQ(nlohmann::json::parse(config_to_json(*a)),
            nlohmann::json::parse(config_to_json(v41_flash_config())));
  EXPECT_EQ(nlohmann::json::parse(config_to_json(*b)),
            nlohmann::json::parse(config_to_json(v4_flash_0731_config())));
}

TEST(Config, EveryPresetValidatesAndRoundTrips) {
  for (Variant v : {Variant::v41, Variant::v4})
    for (Preset p : {Preset::tiny, Preset::small, Preset::full}) {
      Config c = preset_config(p, v);
      ASSERT_TRUE(validate_config(c).ok()) << preset_name(p) << " " << variant_name(v) << ": "
                                           << validate_config(c).to_string();
      std::string text = config_to_json(c);
      auto back = parse_config(text);
      ASSERT_TRUE(back.ok()) << back.status().to_string();
      EXPECT_EQ(config_to_json(*back), text);
    }
}

// Applies `edit` to the V4.1 fixture and expects a refusal whose message contains `needle`.
void expect_refused(const char* fixture, const std::function<void(nlohmann::json&)>& edit,
                    const std::string& needle) {
  auto j = nlohmann::json::parse(read_fixture(fixture));
  edit(j);
  auto c = parse_config(j.dump());
  ASSERT_FALSE(c.ok()) << "accepted; expected refusal naming " << needle;
  EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status().to_string();
}

TEST(Config, RefusesUnsupportedValuesByName) {
  const char* v41 = "v41_flash_config.json";
  const char* v4 = "v4_flash_0731_config.json";
  expect_refused(v41, [](auto& j) { j["text_config"]["scoring_func"] = "softmax"; }, "scoring_func 'softmax'");
  expect_refused(v4, [](auto& j) { j["scoring_func"] = "sigmoid"; }, "scoring_func 'sigmoid'");
  expect_refused(v41, [](auto& j) { j["quantization_config"]["quant_method"] = "awq"; }, "quant_method 'awq'");
  expect_refused(v41, [](auto& j) { j["quantization_config"]["expert_dtype"] = "fp8"; }, "expert_dtype 'fp8'");
  expect_refused(v41, [](auto& j) { j["quantization_config"]["weight_block_size"] = {128, 128}; },
                 "weight_block_size [128, 128]");
  expect_refused(v41, [](auto& j) { j["model_type"] = "deepseek_v3"; }, "model_type 'deepseek_v3'");
  expect_refused(v41, [](auto& j) { j["text_config"]["rope_scaling"]["rope_type"] = "linear"; },
                 "rope_scaling type 'linear'");
  expect_refused(v41, [](auto& j) { j["text_config"]["hidden_act"] = "gelu"; }, "hidden_act");
  expect_refused(v41, [](auto& j) { j["text_config"]["num_key_value_heads"] = 8; }, "num_key_value_heads 8");
  expect_refused(v41, [](auto& j) { j["text_config"].erase("hidden_size"); }, "text_config.hidden_size: missing");
  expect_refused(v41, [](auto& j) { j["text_config"]["hidden_size"] = "big"; }, "text_config.hidden_size: wrong type");
  expect_refused(v41, [](auto& j) { j.erase("text_config"); }, "text_config");
}

TEST(Config, RefusesInconsistentLists) {
  const char* v41 = "v41_flash_config.json";
  expect_refused(v41, [](auto& j) { j["text_config"]["compress_ratios"].erase(42); },
                 "2 DSpark entries but num_nextn_predict_layers is 3");
  expect_refused(v41, [](auto& j) { j["text_config"]["engram_num_embeddings"] = {384006168}; },
                 "engram_num_embeddings has 1 entries");
  expect_refused(v41, [](auto& j) { j["text_config"]["engram_num_embeddings"] = {384006168, 384016683}; },
                 "engram_num_embeddings[1] = 384016683 but the primes of layer 14 sum to 384016682");
  expect_refused(v41, [](auto& j) { j["text_config"]["kv_source_layer_ids"] = {1, 8, 14, 20}; },
                 "layer 1 has compress_ratio 0");
  expect_refused(v41, [](auto& j) { j["text_config"]["kv_source_layer_ids"] = {8, 14, 20}; },
                 "layer 2 (compress_ratio 2) has no KV source");
  expect_refused(v41, [](auto& j) { j["text_config"]["candidate_source_layer_id"] = 24; },
                 "candidate_source_layer_id 24 is not a KV source");
  expect_refused(v41, [](auto& j) { j["text_config"]["index_source_layer_ids"] = {2, 8, 14, 20, 28, 24}; },
                 "index_source_layer_ids must be strictly ascending");
  expect_refused(v41, [](auto& j) { j["text_config"]["compress_ratios"][41] = 2; },
                 "DSpark stages must have ratio 0");
  expect_refused(v41, [](auto& j) { j["text_config"]["dspark_target_layer_ids"] = {37, 38, 40}; },
                 "dspark_target_layer_ids: 40 is not a backbone layer");
  // All problems are listed together.
  auto j = nlohmann::json::parse(read_fixture(v41));
  j["text_config"]["scoring_func"] = "softmax";
  j["text_config"]["topk_method"] = "greedy";
  auto c = parse_config(j.dump());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("scoring_func"), std::string::npos);
  EXPECT_NE(c.status().message().find("topk_method 'greedy'"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::family
