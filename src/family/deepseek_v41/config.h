// Typed model configuration of the DeepSeek-V4 family, read from HF config.json (V4.1 nested, V4 flat).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace dsv4::family {

// V4.1-Flash (and its 1017 snapshot): nested config, CSA2 attention, Engram, delayed mHC pre-mix.
// V4 (V4-Flash-0731): flat config, per-layer compressors (ratio 4 with indexer, others without),
// hash-routed first layers, hc_head final collapse.
enum class Variant : uint8_t { v41, v4 };

std::string_view variant_name(Variant v);  // "v41", "v4-0731"

// rope_scaling: YaRN applies to every layer with compress_ratio > 0 (model-spec.md §3.2).
struct RopeScaling {
  std::string type = "yarn";            // only "yarn" is supported
  double factor = 16;
  double beta_fast = 32;
  double beta_slow = 1;
  int64_t original_max_position_embeddings = 65536;
};

// quantization_config (model-spec.md §2.1, §2.4).
struct QuantConfig {
  std::string quant_method = "fp8";     // only "fp8"
  std::string activation_scheme = "dynamic";
  std::string scale_fmt = "ue8m0";
  std::string fmt = "e4m3";             // V4 spells it out; V4.1 omits it (e4m3 implied)
  std::string expert_dtype = "fp4";     // routed experts: FP4 e2m1 + UE8M0 per 32 along K
  int32_t weight_block_out = 32;        // FP8 weight scale tile: 32x32 (V4.1), 128x128 (V4)
  int32_t weight_block_in = 32;
};

// vision_config (V4.1 only; model-spec.md §2.1, §3.10).
struct VisionConfig {
  int32_t hidden_size = 1024;
  int32_t num_hidden_layers = 32;
  int32_t num_attention_heads = 16;
  int32_t intermediate_size = 2816;
  int32_t patch_size = 14;
  int32_t downsample_ratio = 3;
  int32_t max_image_tokens = 1024;
  int64_t min_pixels = 295936;
  std::optional<double> max_wh_ratio;   // null in the release
  double rope_theta = 10000;
};

// Every dimension and role list of one model. Field names follow the HF config keys.
// Layer ids are 0-based; DSpark stage s has layer id num_hidden_layers + s.
struct Config {
  Variant variant = Variant::v41;
  std::string model_type;               // "deepseek_v41" (root) or "deepseek_v4"
  std::vector<std::string> architectures;
  std::string dtype = "bfloat16";

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;              // D
  int32_t num_hidden_layers = 0;        // backbone layers L
  int32_t num_nextn_predict_layers = 0; // as written; V4-0731 writes 1 but ships 3 stages
  int32_t num_attention_heads = 0;      // H
  int32_t num_key_value_heads = 1;      // must be 1 (one latent shared by all heads)
  int32_t head_dim = 0;                 // d: latent = key = value width
  int32_t qk_rope_head_dim = 0;         // r: the last r dims of q/kv/index vectors are rotated
  int32_t q_lora_rank = 0;
  int32_t o_lora_rank = 0;
  int32_t o_groups = 0;
  double swiglu_limit = 10.0;
  double rms_norm_eps = 0;
  int64_t max_position_embeddings = 0;
  double rope_theta = 10000;            // ratio-0 layers, no YaRN
  double compress_rope_theta = 160000;  // ratio>0 layers, with YaRN
  RopeScaling rope_scaling;
  int32_t sliding_window = 128;

  // One entry per backbone layer, then one per DSpark stage (always 0 there).
  std::vector<int32_t> compress_ratios;
  // V4.1 CSA2 roles (empty / -1 for V4).
  std::vector<int32_t> kv_source_layer_ids;
  std::vector<int32_t> index_source_layer_ids;
  int32_t candidate_source_layer_id = -1;
  int32_t candidate_topk_blocks = 0;
  int32_t candidate_block_size = 0;

  int32_t index_n_heads = 0;
  int32_t index_head_dim = 0;
  int32_t index_topk = 0;

  int32_t n_routed_experts = 0;
  int32_t n_shared_experts = 1;
  int32_t num_experts_per_tok = 0;
  int32_t moe_intermediate_size = 0;
  std::string scoring_func = "sqrtsoftplus";
  std::string topk_method = "noaux_tc";
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.5;
  int32_t num_hash_layers = 0;          // V4: layers [0, num_hash_layers) route by tid2eid

  int32_t hc_mult = 4;
  int32_t hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;
  bool tie_word_embeddings = false;

  // Engram (V4.1; empty for V4).
  std::vector<int32_t> engram_layer_ids;
  std::vector<int64_t> engram_num_embeddings;  // table rows per Engram layer (= sum of its primes)
  int32_t engram_max_ngram_size = 0;
  int32_t engram_n_heads = 0;
  int32_t engram_head_dim = 0;
  int64_t engram_vocab_size = 0;
  int64_t engram_compressed_vocab_size = 0;
  int64_t engram_pad_token_id = 2;

  // DSpark drafter.
  int32_t dspark_block_size = 0;
  int64_t dspark_noise_token_id = 0;
  std::vector<int32_t> dspark_target_layer_ids;
  int32_t dspark_markov_rank = 0;
  int32_t dspark_n_routed_experts = 0;      // V4: = n_routed_experts
  int32_t dspark_num_experts_per_tok = 0;   // V4: = num_experts_per_tok

  int64_t bos_token_id = 0;
  int64_t eos_token_id = 1;
  std::optional<int64_t> pad_token_id;
  std::optional<int64_t> image_token_id;
  bool use_cache = true;
  double initializer_range = 0.02;

  QuantConfig quant;
  std::optional<VisionConfig> vision;       // V4.1 only

  // Derived.
  int32_t num_dspark_stages() const {
    return static_cast<int32_t>(compress_ratios.size()) - num_hidden_layers;
  }
  int32_t num_all_layers() const { return static_cast<int32_t>(compress_ratios.size()); }
  int32_t nope_head_dim() const { return head_dim - qk_rope_head_dim; }
  int32_t engram_num_orders() const { return engram_max_ngram_size - 1; }  // n = 2..max
  int32_t dspark_main_dim() const {  // main_proj input: the tapped layers' streams concatenated
    return static_cast<int32_t>(dspark_target_layer_ids.size()) * static_cast<int32_t>(hidden_size);
  }
  bool has_engram() const { return !engram_layer_ids.empty(); }
  // The FP8 activation block: 32 (V4.1) or 128 (V4); equals the weight tile's K side.
  int32_t act_block() const { return quant.weight_block_in; }
};

// Parses and validates a config.json text; the variant comes from model_type / layout.
StatusOr<Config> parse_config(std::string_view json_text);
// Reads DIR/config.json (or the given file path when it names a file).
StatusOr<Config> load_config(const std::string& path);
// Checks every value the engine depends on; names the first unsupported or inconsistent one.
Status validate_config(const Config& c);
// The same model without its DSpark drafter: no stages (compress_ratios keeps the backbone's entries), no
// taps. What a forward that does not run the drafter is built from.
Config without_dspark(Config c);

// HF-style config.json text for this config: nested for V4.1, flat for V4 (round-trips parse_config).
std::string config_to_json(const Config& c);

}  // namespace dsv4::family
