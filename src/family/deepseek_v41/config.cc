// Parsing of HF config.json (V4.1 nested, V4 flat) into Config, and its JSON writer.
#include "family/deepseek_v41/config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <sys/stat.h>

namespace dsv4::family {

using nlohmann::json;

std::string_view variant_name(Variant v) { return v == Variant::v41 ? "v41" : "v4-0731"; }

namespace {

// Reads typed keys from one JSON object; the first problem is kept and named with its path.
class Reader {
 public:
  Reader(const json& obj, std::string path) : obj_(obj), path_(std::move(path)) {}

  bool has(const char* key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }

  template <typename T>
  void req(const char* key, T& out) {
    if (!has(key)) return fail(key, "missing");
    get(key, out);
  }
  template <typename T>
  void opt(const char* key, T& out) {
    if (has(key)) get(key, out);
  }
  const json* sub(const char* key) {
    if (!has(key)) return nullptr;
    if (!obj_.at(key).is_object()) {
      fail(key, "not an object");
      return nullptr;
    }
    return &obj_.at(key);
  }
  void fail(const std::string& key, const std::string& why) {
    if (error_.empty()) error_ = fmt::format("{}{}: {}", path_, key, why);
  }
  const std::string& error() const { return error_; }
  void absorb(const Reader& other) {
    if (error_.empty()) error_ = other.error_;
  }

 private:
  template <typename T>
  void get(const char* key, T& out) {
    try {
      out = obj_.at(key).get<T>();
    } catch (const json::exception& e) {
      fail(key, fmt::format("wrong type ({})", obj_.at(key).dump()));
    }
  }
  template <typename T>
  void get(const char* key, std::optional<T>& out) {
    T v{};
    get(key, v);
    out = v;
  }

  const json& obj_;
  std::string path_;
  std::string error_;
};

void read_rope_scaling(Reader& r, Config& c) {
  const json* rs = r.sub("rope_scaling");
  if (!rs) return r.fail("rope_scaling", "missing");
  Reader s(*rs, "rope_scaling.");
  if (s.has("rope_type")) s.req("rope_type", c.rope_scaling.type);
  else s.req("type", c.rope_scaling.type);
  s.req("factor", c.rope_scaling.factor);
  s.req("beta_fast", c.rope_scaling.beta_fast);
  s.req("beta_slow", c.rope_scaling.beta_slow);
  s.req("original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings);
  r.absorb(s);
}

void read_quant(const json& q, Config& c, Reader& parent) {
  Reader r(q, "quantization_config.");
  r.req("quant_method", c.quant.quant_method);
  r.opt("activation_scheme", c.quant.activation_scheme);
  r.opt("scale_fmt", c.quant.scale_fmt);
  r.opt("fmt", c.quant.fmt);
  r.opt("expert_dtype", c.quant.expert_dtype);
  std::vector<int32_t> block;
  r.req("weight_block_size", block);
  if (r.error().empty()) {
    if (block.size() != 2) r.fail("weight_block_size", "must have 2 entries");
    else c.quant.weight_block_out = block[0], c.quant.weight_block_in = block[1];
  }
  parent.absorb(r);
}

// The language-model keys: text_config for V4.1, the root for V4.
void read_text(Reader& r, Config& c) {
  r.req("vocab_size", c.vocab_size);
  r.req("hidden_size", c.hidden_size);
  r.req("num_hidden_layers", c.num_hidden_layers);
  r.opt("num_nextn_predict_layers", c.num_nextn_predict_layers);
  r.req("num_attention_heads", c.num_attention_heads);
  r.opt("num_key_value_heads", c.num_key_value_heads);
  r.req("head_dim", c.head_dim);
  r.req("qk_rope_head_dim", c.qk_rope_head_dim);
  r.req("q_lora_rank", c.q_lora_rank);
  r.req("o_lora_rank", c.o_lora_rank);
  r.req("o_groups", c.o_groups);
  bool attention_bias = false;
  r.opt("attention_bias", attention_bias);
  if (attention_bias) r.fail("attention_bias", "true is not supported (the family has no biases)");
  std::string act = "silu";
  r.opt("hidden_act", act);
  if (act != "silu") r.fail("hidden_act", fmt::format("'{}' is not supported (only silu)", act));
  r.opt("swiglu_limit", c.swiglu_limit);
  r.req("rms_norm_eps", c.rms_norm_eps);
  r.req("max_position_embeddings", c.max_position_embeddings);
  r.req("rope_theta", c.rope_theta);
  r.req("compress_rope_theta", c.compress_rope_theta);
  read_rope_scaling(r, c);
  r.req("sliding_window", c.sliding_window);
  r.req("compress_ratios", c.compress_ratios);
  r.opt("kv_source_layer_ids", c.kv_source_layer_ids);
  r.opt("index_source_layer_ids", c.index_source_layer_ids);
  r.opt("candidate_source_layer_id", c.candidate_source_layer_id);
  r.opt("candidate_topk_blocks", c.candidate_topk_blocks);
  r.opt("candidate_block_size", c.candidate_block_size);
  r.req("index_n_heads", c.index_n_heads);
  r.req("index_head_dim", c.index_head_dim);
  r.req("index_topk", c.index_topk);
  r.req("n_routed_experts", c.n_routed_experts);
  r.opt("n_shared_experts", c.n_shared_experts);
  r.req("num_experts_per_tok", c.num_experts_per_tok);
  r.req("moe_intermediate_size", c.moe_intermediate_size);
  r.req("scoring_func", c.scoring_func);
  r.opt("topk_method", c.topk_method);
  r.opt("norm_topk_prob", c.norm_topk_prob);
  r.opt("routed_scaling_factor", c.routed_scaling_factor);
  r.opt("num_hash_layers", c.num_hash_layers);
  r.opt("hc_mult", c.hc_mult);
  r.opt("hc_sinkhorn_iters", c.hc_sinkhorn_iters);
  r.opt("hc_eps", c.hc_eps);
  r.opt("tie_word_embeddings", c.tie_word_embeddings);
  r.opt("engram_layer_ids", c.engram_layer_ids);
  r.opt("engram_num_embeddings", c.engram_num_embeddings);
  r.opt("engram_max_ngram_size", c.engram_max_ngram_size);
  r.opt("engram_n_heads", c.engram_n_heads);
  r.opt("engram_head_dim", c.engram_head_dim);
  r.opt("engram_vocab_size", c.engram_vocab_size);
  r.opt("engram_compressed_vocab_size", c.engram_compressed_vocab_size);
  r.opt("engram_pad_token_id", c.engram_pad_token_id);
  r.opt("dspark_block_size", c.dspark_block_size);
  r.opt("dspark_noise_token_id", c.dspark_noise_token_id);
  r.opt("dspark_target_layer_ids", c.dspark_target_layer_ids);
  r.opt("dspark_markov_rank", c.dspark_markov_rank);
  c.dspark_n_routed_experts = c.n_routed_experts;
  c.dspark_num_experts_per_tok = c.num_experts_per_tok;
  r.opt("dspark_n_routed_experts", c.dspark_n_routed_experts);
  r.opt("dspark_num_experts_per_tok", c.dspark_num_experts_per_tok);
  r.opt("use_cache", c.use_cache);
  r.opt("initializer_range", c.initializer_range);
  r.opt("bos_token_id", c.bos_token_id);
  r.opt("eos_token_id", c.eos_token_id);
  r.opt("pad_token_id", c.pad_token_id);
}

void read_vision(const json& v, Config& c, Reader& parent) {
  Reader r(v, "vision_config.");
  VisionConfig vc;
  r.req("hidden_size", vc.hidden_size);
  r.req("num_hidden_layers", vc.num_hidden_layers);
  r.req("num_attention_heads", vc.num_attention_heads);
  r.req("intermediate_size", vc.intermediate_size);
  r.req("patch_size", vc.patch_size);
  r.req("downsample_ratio", vc.downsample_ratio);
  r.opt("max_image_tokens", vc.max_image_tokens);
  r.opt("min_pixels", vc.min_pixels);
  r.opt("max_wh_ratio", vc.max_wh_ratio);
  r.opt("rope_theta", vc.rope_theta);
  c.vision = vc;
  parent.absorb(r);
}

}  // namespace

StatusOr<Config> parse_config(std::string_view json_text) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    return error(StatusCode::invalid_argument, "config.json: not valid JSON: {}", e.what());
  }
  if (!root.is_object()) return error(StatusCode::invalid_argument, "config.json: not a JSON object");
  Config c;
  Reader r(root, "");
  r.req("model_type", c.model_type);
  if (!r.error().empty()) return error(StatusCode::invalid_argument, "config.json: {}", r.error());
  r.opt("architectures", c.architectures);
  if (r.has("dtype")) r.opt("dtype", c.dtype);
  else r.opt("torch_dtype", c.dtype);

  if (c.model_type == "deepseek_v41") {
    c.variant = Variant::v41;
    const json* text = r.sub("text_config");
    if (!text) {
      return error(StatusCode::invalid_argument,
                   "config.json: model_type deepseek_v41 needs a nested text_config");
    }
    Reader t(*text, "text_config.");
    std::string text_type;
    t.opt("model_type", text_type);
    if (!text_type.empty() && text_type != "deepseek_v41_text")
      t.fail("model_type", fmt::format("'{}' is not deepseek_v41_text", text_type));
    read_text(t, c);
    r.absorb(t);
    // Root token ids win over text_config's (the release writes them at the root).
    r.opt("bos_token_id", c.bos_token_id);
    r.opt("eos_token_id", c.eos_token_id);
    r.opt("pad_token_id", c.pad_token_id);
    r.opt("image_token_id", c.image_token_id);
    if (const json* q = r.sub("quantization_config")) read_quant(*q, c, r);
    else r.fail("quantization_config", "missing");
    if (const json* v = r.sub("vision_config")) read_vision(*v, c, r);
  } else if (c.model_type == "deepseek_v4") {
    c.variant = Variant::v4;
    if (r.has("text_config"))
      r.fail("text_config", "present in a flat deepseek_v4 config");
    read_text(r, c);
    if (const json* q = r.sub("quantization_config")) read_quant(*q, c, r);
    else r.fail("quantization_config", "missing");
    r.opt("expert_dtype", c.quant.expert_dtype);  // V4 writes it at the root
  } else {
    return error(StatusCode::invalid_argument,
                 "config.json: model_type '{}' is not supported (deepseek_v41 or deepseek_v4)",
                 c.model_type);
  }
  if (!r.error().empty()) return error(StatusCode::invalid_argument, "config.json: {}", r.error());
  DSV4_RETURN_IF_ERROR(validate_config(c));
  return c;
}

StatusOr<Config> load_config(const std::string& path) {
  std::string file = path;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) file = path + "/config.json";
  std::ifstream in(file, std::ios::binary);
  if (!in) return error(StatusCode::not_found, "{}: cannot open", file);
  std::stringstream ss;
  ss << in.rdbuf();
  auto c = parse_config(ss.str());
  if (!c.ok()) return c.status().with_context(file);
  return c;
}

namespace {

json text_json(const Config& c) {
  json t;
  t["vocab_size"] = c.vocab_size;
  t["hidden_size"] = c.hidden_size;
  t["num_hidden_layers"] = c.num_hidden_layers;
  t["num_nextn_predict_layers"] = c.num_nextn_predict_layers;
  t["num_attention_heads"] = c.num_attention_heads;
  t["num_key_value_heads"] = c.num_key_value_heads;
  t["head_dim"] = c.head_dim;
  t["qk_rope_head_dim"] = c.qk_rope_head_dim;
  t["q_lora_rank"] = c.q_lora_rank;
  t["o_lora_rank"] = c.o_lora_rank;
  t["o_groups"] = c.o_groups;
  t["attention_bias"] = false;
  t["attention_dropout"] = 0.0;
  t["hidden_act"] = "silu";
  t["swiglu_limit"] = c.swiglu_limit;
  t["rms_norm_eps"] = c.rms_norm_eps;
  t["initializer_range"] = c.initializer_range;
  t["max_position_embeddings"] = c.max_position_embeddings;
  t["rope_theta"] = c.rope_theta;
  t["compress_rope_theta"] = c.compress_rope_theta;
  json rs;
  rs[c.variant == Variant::v41 ? "rope_type" : "type"] = c.rope_scaling.type;
  rs["factor"] = c.rope_scaling.factor;
  rs["beta_fast"] = c.rope_scaling.beta_fast;
  rs["beta_slow"] = c.rope_scaling.beta_slow;
  rs["original_max_position_embeddings"] = c.rope_scaling.original_max_position_embeddings;
  t["rope_scaling"] = rs;
  t["sliding_window"] = c.sliding_window;
  t["compress_ratios"] = c.compress_ratios;
  if (c.variant == Variant::v41) {
    t["kv_source_layer_ids"] = c.kv_source_layer_ids;
    t["index_source_layer_ids"] = c.index_source_layer_ids;
    t["candidate_source_layer_id"] = c.candidate_source_layer_id;
    t["candidate_topk_blocks"] = c.candidate_topk_blocks;
    t["candidate_block_size"] = c.candidate_block_size;
  }
  t["index_n_heads"] = c.index_n_heads;
  t["index_head_dim"] = c.index_head_dim;
  t["index_topk"] = c.index_topk;
  t["n_routed_experts"] = c.n_routed_experts;
  t["n_shared_experts"] = c.n_shared_experts;
  t["num_experts_per_tok"] = c.num_experts_per_tok;
  t["moe_intermediate_size"] = c.moe_intermediate_size;
  t["scoring_func"] = c.scoring_func;
  t["topk_method"] = c.topk_method;
  t["norm_topk_prob"] = c.norm_topk_prob;
  t["routed_scaling_factor"] = c.routed_scaling_factor;
  if (c.variant == Variant::v4) t["num_hash_layers"] = c.num_hash_layers;
  t["hc_mult"] = c.hc_mult;
  t["hc_sinkhorn_iters"] = c.hc_sinkhorn_iters;
  t["hc_eps"] = c.hc_eps;
  t["tie_word_embeddings"] = c.tie_word_embeddings;
  t["use_cache"] = c.use_cache;
  if (c.variant == Variant::v41) {
    t["engram_layer_ids"] = c.engram_layer_ids;
    t["engram_num_embeddings"] = c.engram_num_embeddings;
    t["engram_max_ngram_size"] = c.engram_max_ngram_size;
    t["engram_n_heads"] = c.engram_n_heads;
    t["engram_head_dim"] = c.engram_head_dim;
    t["engram_vocab_size"] = c.engram_vocab_size;
    t["engram_compressed_vocab_size"] = c.engram_compressed_vocab_size;
    t["engram_pad_token_id"] = c.engram_pad_token_id;
  }
  t["dspark_block_size"] = c.dspark_block_size;
  t["dspark_noise_token_id"] = c.dspark_noise_token_id;
  t["dspark_target_layer_ids"] = c.dspark_target_layer_ids;
  t["dspark_markov_rank"] = c.dspark_markov_rank;
  if (c.variant == Variant::v41) {
    t["dspark_n_routed_experts"] = c.dspark_n_routed_experts;
    t["dspark_num_experts_per_tok"] = c.dspark_num_experts_per_tok;
  }
  return t;
}

json quant_json(const Config& c) {
  json q;
  q["activation_scheme"] = c.quant.activation_scheme;
  q["quant_method"] = c.quant.quant_method;
  q["scale_fmt"] = c.quant.scale_fmt;
  q["weight_block_size"] = {c.quant.weight_block_out, c.quant.weight_block_in};
  if (c.variant == Variant::v41) q["expert_dtype"] = c.quant.expert_dtype;
  else q["fmt"] = c.quant.fmt;
  return q;
}

}  // namespace

std::string config_to_json(const Config& c) {
  json root;
  if (c.variant == Variant::v41) {
    root["architectures"] = c.architectures.empty() ? std::vector<std::string>{"DeepseekV41ForCausalLM"}
                                                    : c.architectures;
    root["model_type"] = "deepseek_v41";
    root["dtype"] = c.dtype;
    root["bos_token_id"] = c.bos_token_id;
    root["eos_token_id"] = c.eos_token_id;
    if (c.pad_token_id) root["pad_token_id"] = *c.pad_token_id;
    if (c.image_token_id) root["image_token_id"] = *c.image_token_id;
    root["quantization_config"] = quant_json(c);
    json t = text_json(c);
    t["model_type"] = "deepseek_v41_text";
    root["text_config"] = t;
    if (c.vision) {
      const VisionConfig& v = *c.vision;
      json vj;
      vj["model_type"] = "deepseek_v41_vision";
      vj["hidden_size"] = v.hidden_size;
      vj["num_hidden_layers"] = v.num_hidden_layers;
      vj["num_attention_heads"] = v.num_attention_heads;
      vj["intermediate_size"] = v.intermediate_size;
      vj["patch_size"] = v.patch_size;
      vj["downsample_ratio"] = v.downsample_ratio;
      vj["max_image_tokens"] = v.max_image_tokens;
      vj["min_pixels"] = v.min_pixels;
      vj["max_wh_ratio"] = v.max_wh_ratio ? json(*v.max_wh_ratio) : json(nullptr);
      vj["rope_theta"] = v.rope_theta;
      root["vision_config"] = vj;
    }
  } else {
    root = text_json(c);
    root["architectures"] = c.architectures.empty() ? std::vector<std::string>{"DeepseekV4ForCausalLM"}
                                                    : c.architectures;
    root["model_type"] = "deepseek_v4";
    root["torch_dtype"] = c.dtype;
    root["bos_token_id"] = c.bos_token_id;
    root["eos_token_id"] = c.eos_token_id;
    if (c.pad_token_id) root["pad_token_id"] = *c.pad_token_id;
    root["expert_dtype"] = c.quant.expert_dtype;
    root["quantization_config"] = quant_json(c);
  }
  return root.dump(2) + "\n";
}

Config without_dspark(Config c) {
  c.compress_ratios.resize(static_cast<size_t>(c.num_hidden_layers));
  c.num_nextn_predict_layers = 0;
  c.dspark_target_layer_ids.clear();
  return c;
}

}  // namespace dsv4::family
