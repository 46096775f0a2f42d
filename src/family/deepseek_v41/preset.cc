// Preset configs: the two releases (model-spec.md §2.1, §2.4) and small shapes with every layer role.
#include "family/deepseek_v41/preset.h"

#include "family/deepseek_v41/engram_layout.h"

namespace dsv4::family {

std::string_view preset_name(Preset p) {
  switch (p) {
    case Preset::tiny: return "tiny";
    case Preset::small: return "small";
    case Preset::full: return "full";
  }
  return "?";
}

StatusOr<Preset> parse_preset(std::string_view name) {
  if (name == "tiny") return Preset::tiny;
  if (name == "small") return Preset::small;
  if (name == "full") return Preset::full;
  return error(StatusCode::invalid_argument, "unknown preset '{}' (tiny, small or full)", name);
}

StatusOr<Variant> parse_variant(std::string_view name) {
  if (name == "v41" || name == "v4.1") return Variant::v41;
  if (name == "v4-0731" || name == "v4" || name == "0731") return Variant::v4;
  return error(StatusCode::invalid_argument, "unknown variant '{}' (v41 or v4-0731)", name);
}

namespace {

// Keys shared by both releases (model-spec.md §2.1, §2.4).
Config common_release() {
  Config c;
  c.vocab_size = 129280;
  c.num_attention_heads = 64;
  c.num_key_value_heads = 1;
  c.head_dim = 512;
  c.qk_rope_head_dim = 64;
  c.o_lora_rank = 1024;
  c.o_groups = 8;
  c.swiglu_limit = 10.0;
  c.max_position_embeddings = 1048576;
  c.rope_theta = 10000;
  c.compress_rope_theta = 160000;
  c.rope_scaling = RopeScaling{"yarn", 16, 32, 1, 65536};
  c.sliding_window = 128;
  c.index_head_dim = 128;
  c.index_topk = 512;
  c.n_shared_experts = 1;
  c.num_experts_per_tok = 6;
  c.scoring_func = "sqrtsoftplus";
  c.topk_method = "noaux_tc";
  c.norm_topk_prob = true;
  c.routed_scaling_factor = 1.5;
  c.hc_mult = 4;
  c.hc_sinkhorn_iters = 20;
  c.hc_eps = 1e-6;
  c.tie_word_embeddings = false;
  c.dspark_block_size = 5;
  c.dspark_noise_token_id = 128799;
  c.dspark_markov_rank = 256;
  c.bos_token_id = 0;
  c.eos_token_id = 1;
  return c;
}

// Fills engram_num_embeddings from the §3.4(b) primes of the config's own vocabulary.
void fill_engram_rows(Config& c) {
  c.engram_num_embeddings.clear();
  for (const auto& l : compute_engram_layout(c).layers) c.engram_num_embeddings.push_back(l.rows);
}

std::vector<int32_t> ratios(std::initializer_list<std::pair<int32_t, int32_t>> runs) {
  std::vector<int32_t> v;
  for (auto [value, count] : runs) v.insert(v.end(), count, value);
  return v;
}

// The keys every small preset sets (the rest are its release's); its DSpark stages tap the last
// three layers.
struct SmallShape {
  int64_t hidden = 0;
  int32_t layers = 0, heads = 0, head_dim = 0, q_lora = 0, o_lora = 0, o_groups = 0, window = 0;
  std::vector<int32_t> compress;  // compress_ratios: layers + 3 stages
  int32_t index_heads = 0, index_topk = 0, experts = 0, experts_per_tok = 0, moe_inter = 0, markov_rank = 0;
};

void set_shape(Config& c, const SmallShape& s) {
  c.hidden_size = s.hidden;
  c.num_hidden_layers = s.layers;
  c.num_attention_heads = s.heads;
  c.head_dim = s.head_dim;
  c.q_lora_rank = s.q_lora;
  c.o_lora_rank = s.o_lora;
  c.o_groups = s.o_groups;
  c.sliding_window = s.window;
  c.compress_ratios = s.compress;
  c.index_n_heads = s.index_heads;
  c.index_topk = s.index_topk;
  c.n_routed_experts = s.experts;
  c.num_experts_per_tok = s.experts_per_tok;
  c.moe_intermediate_size = s.moe_inter;
  c.dspark_target_layer_ids = {s.layers - 3, s.layers - 2, s.layers - 1};
  c.dspark_markov_rank = s.markov_rank;
}

Config v41_small_shape(Preset p) {
  Config c = v41_flash_config();
  if (p == Preset::tiny) {
    // 10 layers + 3 stages. Roles: 0 SWA, 1 SWA+Engram, 2 full r2, 3 reuse r2, 4 full r2 + Engram,
    // 5 full r1 + candidate source, 6 reuse r1, 7 reindex r1 (tap), 8 reuse r1 (tap), 9 reuse (tap).
    set_shape(c, {.hidden = 256, .layers = 10, .heads = 4, .head_dim = 128, .q_lora = 128, .o_lora = 64,
                  .o_groups = 2, .window = 16, .compress = ratios({{0, 2}, {2, 3}, {1, 5}, {0, 3}}),
                  .index_heads = 4, .index_topk = 8, .experts = 8, .experts_per_tok = 2, .moe_inter = 64,
                  .markov_rank = 32});
    c.kv_source_layer_ids = {2, 4, 5};
    c.index_source_layer_ids = {2, 4, 5, 7};
    c.candidate_source_layer_id = 5;
    c.candidate_topk_blocks = 4;
    c.candidate_block_size = 4;
    c.engram_layer_ids = {1, 4};
    c.engram_n_heads = 2;
    c.engram_head_dim = 64;
    c.engram_vocab_size = 1000;
    c.dspark_n_routed_experts = 4;
    c.dspark_num_experts_per_tok = 2;
    c.vision = VisionConfig{64, 1, 1, 128, 14, 3, 1024, 295936, std::nullopt, 10000};
  } else {
    // 16 layers + 3 stages, the real head_dim 512 (so the production KV row layouts apply).
    set_shape(c, {.hidden = 512, .layers = 16, .heads = 8, .head_dim = 512, .q_lora = 256, .o_lora = 256,
                  .o_groups = 4, .window = 128, .compress = ratios({{0, 2}, {2, 6}, {1, 8}, {0, 3}}),
                  .index_heads = 8, .index_topk = 64, .experts = 16, .experts_per_tok = 4, .moe_inter = 256,
                  .markov_rank = 64});
    c.kv_source_layer_ids = {2, 5, 8};
    c.index_source_layer_ids = {2, 5, 8, 11, 13};
    c.candidate_source_layer_id = 8;
    c.candidate_topk_blocks = 16;
    c.candidate_block_size = 8;
    c.engram_layer_ids = {1, 5};
    c.engram_n_heads = 4;
    c.engram_head_dim = 64;
    c.engram_vocab_size = 4000;
    c.dspark_n_routed_experts = 8;
    c.dspark_num_experts_per_tok = 2;
    c.vision = VisionConfig{128, 2, 2, 256, 14, 3, 1024, 295936, std::nullopt, 10000};
  }
  fill_engram_rows(c);
  return c;
}

Config v4_small_shape(Preset p) {
  Config c = v4_flash_0731_config();
  if (p == Preset::tiny) {
    // 8 layers + 3 stages: 0-1 SWA (hash-routed 0-2), CSA ratio 4 on 2/4/6, HCA ratio 16 on 3/5/7.
    set_shape(c, {.hidden = 256, .layers = 8, .heads = 4, .head_dim = 128, .q_lora = 128, .o_lora = 128,
                  .o_groups = 2, .window = 16, .compress = {0, 0, 4, 16, 4, 16, 4, 16, 0, 0, 0},
                  .index_heads = 4, .index_topk = 8, .experts = 8, .experts_per_tok = 2, .moe_inter = 128,
                  .markov_rank = 32});
  } else {
    set_shape(c, {.hidden = 512, .layers = 12, .heads = 8, .head_dim = 512, .q_lora = 256, .o_lora = 256,
                  .o_groups = 4, .window = 128, .compress = {0, 0, 4, 32, 4, 32, 4, 32, 4, 32, 4, 32, 0, 0, 0},
                  .index_heads = 8, .index_topk = 64, .experts = 16, .experts_per_tok = 4, .moe_inter = 256,
                  .markov_rank = 64});
  }
  c.dspark_n_routed_experts = c.n_routed_experts;
  c.dspark_num_experts_per_tok = c.num_experts_per_tok;
  return c;
}

}  // namespace

Config v41_flash_config() {
  Config c = common_release();
  c.variant = Variant::v41;
  c.model_type = "deepseek_v41";
  c.architectures = {"DeepseekV41ForCausalLM"};
  c.dtype = "bfloat16";
  c.pad_token_id = 2;
  c.image_token_id = 129264;
  c.hidden_size = 5120;
  c.num_hidden_layers = 40;
  c.num_nextn_predict_layers = 3;
  c.q_lora_rank = 1280;
  c.rms_norm_eps = 1e-20;
  c.compress_ratios = ratios({{0, 2}, {2, 18}, {1, 20}, {0, 3}});
  c.kv_source_layer_ids = {2, 8, 14, 20};
  c.index_source_layer_ids = {2, 8, 14, 20, 24, 28, 32, 36};
  c.candidate_source_layer_id = 20;
  c.candidate_topk_blocks = 2048;
  c.candidate_block_size = 8;
  c.index_n_heads = 32;
  c.n_routed_experts = 384;
  c.moe_intermediate_size = 2304;
  c.engram_layer_ids = {1, 14};
  c.engram_num_embeddings = {384006168, 384016682};
  c.engram_max_ngram_size = 4;
  c.engram_n_heads = 8;
  c.engram_head_dim = 256;
  c.engram_vocab_size = 16000000;
  c.engram_compressed_vocab_size = 99092;
  c.engram_pad_token_id = 2;
  c.dspark_target_layer_ids = {37, 38, 39};
  c.dspark_n_routed_experts = 128;
  c.dspark_num_experts_per_tok = 3;
  c.quant = QuantConfig{"fp8", "dynamic", "ue8m0", "e4m3", "fp4", 32, 32};
  c.vision = VisionConfig{1024, 32, 16, 2816, 14, 3, 1024, 295936, std::nullopt, 10000};
  return c;
}

Config v4_flash_0731_config() {
  Config c = common_release();
  c.variant = Variant::v4;
  c.model_type = "deepseek_v4";
  c.architectures = {"DeepseekV4ForCausalLM"};
  c.hidden_size = 4096;
  c.num_hidden_layers = 43;
  c.num_nextn_predict_layers = 1;  // as written; the checkpoint has 3 DSpark stages
  c.q_lora_rank = 1024;
  c.rms_norm_eps = 1e-6;
  c.compress_ratios = {0, 0};
  for (int i = 0; i < 20; ++i) c.compress_ratios.insert(c.compress_ratios.end(), {4, 128});
  c.compress_ratios.insert(c.compress_ratios.end(), {4, 0, 0, 0});
  c.index_n_heads = 64;
  c.n_routed_experts = 256;
  c.moe_intermediate_size = 2048;
  c.num_hash_layers = 3;
  c.dspark_target_layer_ids = {40, 41, 42};
  c.dspark_n_routed_experts = 256;
  c.dspark_num_experts_per_tok = 6;
  c.quant = QuantConfig{"fp8", "dynamic", "ue8m0", "e4m3", "fp4", 128, 128};
  return c;
}

Config preset_config(Preset p, Variant v) {
  if (p == Preset::full) return v == Variant::v41 ? v41_flash_config() : v4_flash_0731_config();
  return v == Variant::v41 ? v41_small_shape(p) : v4_small_shape(p);
}

}  // namespace dsv4::family
