// validate_config: every value the engine depends on, refused by name when unsupported or inconsistent.
#include <algorithm>
#include <string>
#include <vector>

#include "family/deepseek_v41/config.h"
#include "family/deepseek_v41/engram_layout.h"

namespace dsv4::family {
namespace {

struct Problems {
  std::vector<std::string> list;
  template <typename... Args>
  void add(fmt::format_string<Args...> f, Args&&... args) {
    list.push_back(fmt::format(f, std::forward<Args>(args)...));
  }
  void need(bool ok, const char* what) {
    if (!ok) list.emplace_back(what);
  }
};

bool strictly_ascending(const std::vector<int32_t>& v) {
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] <= v[i - 1]) return false;
  return true;
}
bool contains(const std::vector<int32_t>& v, int32_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// The V4.1 CSA2 role lists (model-spec.md §2.3): sources, reuse and reindex must be resolvable.
void check_v41_roles(const Config& c, Problems& p) {
  const int32_t L = c.num_hidden_layers;
  auto check_list = [&](const std::vector<int32_t>& ids, const char* name) {
    if (!strictly_ascending(ids)) p.add("{} must be strictly ascending", name);
    for (int32_t id : ids) {
      if (id < 0 || id >= L) p.add("{}: layer {} is not a backbone layer (0..{})", name, id, L - 1);
      else if (c.compress_ratios[id] == 0)
        p.add("{}: layer {} has compress_ratio 0 (window-only layers cannot be sources)", name, id);
    }
  };
  check_list(c.kv_source_layer_ids, "kv_source_layer_ids");
  check_list(c.index_source_layer_ids, "index_source_layer_ids");
  for (int32_t id : c.kv_source_layer_ids)
    if (!contains(c.index_source_layer_ids, id))
      p.add("kv_source_layer_ids: layer {} is not also an index source (it would own index keys "
            "without an indexer)", id);
  if (c.candidate_source_layer_id >= 0) {
    if (!contains(c.kv_source_layer_ids, c.candidate_source_layer_id))
      p.add("candidate_source_layer_id {} is not a KV source layer", c.candidate_source_layer_id);
    if (c.candidate_topk_blocks <= 0 || c.candidate_block_size <= 0)
      p.add("candidate_topk_blocks and candidate_block_size must be positive");
  } else if (c.candidate_source_layer_id != -1) {
    p.add("candidate_source_layer_id {} is negative", c.candidate_source_layer_id);
  }
  if (!p.list.empty()) return;
  int32_t kv_src = -1, idx_src = -1;
  for (int32_t l = 0; l < L; ++l) {
    const int32_t ratio = c.compress_ratios[l];
    if (contains(c.kv_source_layer_ids, l)) kv_src = l;
    if (contains(c.index_source_layer_ids, l)) idx_src = l;
    if (ratio == 0) continue;
    if (kv_src < 0 || c.compress_ratios[kv_src] != ratio) {
      p.add("layer {} (compress_ratio {}) has no KV source layer at or before it with the same ratio",
            l, ratio);
      continue;
    }
    if (idx_src < 0 || c.compress_ratios[idx_src] != ratio)
      p.add("layer {} (compress_ratio {}) has no index source at or before it with the same ratio", l,
            ratio);
    const bool reindex = contains(c.index_source_layer_ids, l) && !contains(c.kv_source_layer_ids, l);
    if (reindex && kv_src != c.candidate_source_layer_id)
      p.add("layer {} re-indexes (index source without KV) but its newest KV source {} is not the "
            "candidate source layer", l, kv_src);
  }
}

void check_engram(const Config& c, Problems& p) {
  const int32_t L = c.num_hidden_layers;
  if (!strictly_ascending(c.engram_layer_ids)) p.add("engram_layer_ids must be strictly ascending");
  for (int32_t id : c.engram_layer_ids)
    if (id < 0 || id >= L) p.add("engram_layer_ids: layer {} is not a backbone layer", id);
  if (c.engram_num_embeddings.size() != c.engram_layer_ids.size())
    p.add("engram_num_embeddings has {} entries, engram_layer_ids {}", c.engram_num_embeddings.size(),
          c.engram_layer_ids.size());
  p.need(c.engram_max_ngram_size >= 2, "engram_max_ngram_size must be >= 2");
  p.need(c.engram_n_heads > 0, "engram_n_heads must be positive");
  p.need(c.engram_head_dim > 0 && c.engram_head_dim % 32 == 0,
         "engram_head_dim must be a positive multiple of 32 (one UE8M0 scale per 32 columns)");
  p.need(c.engram_vocab_size >= 2, "engram_vocab_size must be >= 2");
  p.need(c.engram_compressed_vocab_size > 0 && c.engram_compressed_vocab_size <= c.vocab_size,
         "engram_compressed_vocab_size must be in 1..vocab_size (it compresses the token ids)");
  p.need(c.engram_pad_token_id >= 0 && c.engram_pad_token_id < c.vocab_size,
         "engram_pad_token_id must be a token id");
  if (!p.list.empty()) return;
  const EngramLayout layout = compute_engram_layout(c);
  for (size_t i = 0; i < c.engram_layer_ids.size(); ++i)
    if (layout.layers[i].rows != c.engram_num_embeddings[i])
      p.add("engram_num_embeddings[{}] = {} but the primes of layer {} sum to {} (model-spec §3.4b)", i,
            c.engram_num_embeddings[i], c.engram_layer_ids[i], layout.layers[i].rows);
}

}  // namespace

Status validate_config(const Config& c) {
  Problems p;
  const bool v41 = c.variant == Variant::v41;
  p.need(c.vocab_size > 0, "vocab_size must be positive");
  p.need(c.hidden_size > 0, "hidden_size must be positive");
  p.need(c.num_hidden_layers > 0, "num_hidden_layers must be positive");
  p.need(c.num_attention_heads > 0, "num_attention_heads must be positive");
  if (c.num_key_value_heads != 1)
    p.add("num_key_value_heads {} is not supported (one latent KV head)", c.num_key_value_heads);
  p.need(c.qk_rope_head_dim > 0 && c.qk_rope_head_dim % 2 == 0, "qk_rope_head_dim must be positive, even");
  p.need(c.head_dim > c.qk_rope_head_dim, "head_dim must exceed qk_rope_head_dim");
  if (c.scoring_func != "sqrtsoftplus")
    p.add("scoring_func '{}' is not supported (only sqrtsoftplus)", c.scoring_func);
  if (c.topk_method != "noaux_tc") p.add("topk_method '{}' is not supported (only noaux_tc)", c.topk_method);
  if (!c.norm_topk_prob) p.add("norm_topk_prob false is not supported");
  if (c.tie_word_embeddings) p.add("tie_word_embeddings true is not supported (separate head.weight)");
  if (c.quant.quant_method != "fp8") p.add("quant_method '{}' is not supported (only fp8)", c.quant.quant_method);
  if (c.quant.activation_scheme != "dynamic")
    p.add("activation_scheme '{}' is not supported (only dynamic)", c.quant.activation_scheme);
  if (c.quant.scale_fmt != "ue8m0") p.add("scale_fmt '{}' is not supported (only ue8m0)", c.quant.scale_fmt);
  if (c.quant.fmt != "e4m3") p.add("fmt '{}' is not supported (only e4m3)", c.quant.fmt);
  if (c.quant.expert_dtype != "fp4")
    p.add("expert_dtype '{}' is not supported (only fp4)", c.quant.expert_dtype);
  const int32_t blk = v41 ? 32 : 128;
  if (c.quant.weight_block_out != blk || c.quant.weight_block_in != blk)
    p.add("weight_block_size [{}, {}] is not supported for {} (only [{}, {}])", c.quant.weight_block_out,
          c.quant.weight_block_in, variant_name(c.variant), blk, blk);
  if (c.rope_scaling.type != "yarn")
    p.add("rope_scaling type '{}' is not supported (only yarn)", c.rope_scaling.type);
  p.need(c.rope_scaling.factor > 0 && c.rope_scaling.original_max_position_embeddings > 0,
         "rope_scaling factor and original_max_position_embeddings must be positive");
  p.need(c.rope_theta > 0 && c.compress_rope_theta > 0, "rope_theta and compress_rope_theta must be positive");
  p.need(c.sliding_window > 0, "sliding_window must be positive");
  p.need(c.hc_mult > 0 && c.hc_sinkhorn_iters > 0, "hc_mult and hc_sinkhorn_iters must be positive");
  if (c.n_shared_experts != 1) p.add("n_shared_experts {} is not supported (only 1)", c.n_shared_experts);
  p.need(c.n_routed_experts > 0, "n_routed_experts must be positive");
  if (c.num_experts_per_tok < 1 || c.num_experts_per_tok > c.n_routed_experts)
    p.add("num_experts_per_tok {} outside 1..n_routed_experts", c.num_experts_per_tok);
  p.need(c.index_n_heads > 0 && c.index_topk > 0, "index_n_heads and index_topk must be positive");
  p.need(c.index_head_dim >= c.qk_rope_head_dim && c.index_head_dim % 32 == 0,
         "index_head_dim must be a multiple of 32 holding the rope dims");
  if (c.o_groups <= 0 || c.num_attention_heads % c.o_groups != 0)
    p.add("o_groups {} must divide num_attention_heads {}", c.o_groups, c.num_attention_heads);
  if (!p.list.empty()) goto done;
  {
    // Every FP8/FP4 linear's input width is a whole number of activation blocks.
    const int64_t ab = c.act_block();
    const std::pair<const char*, int64_t> ins[] = {
        {"hidden_size", c.hidden_size},
        {"q_lora_rank", c.q_lora_rank},
        {"o_groups*o_lora_rank", int64_t{c.o_groups} * c.o_lora_rank},
        {"num_attention_heads*head_dim/o_groups",
         int64_t{c.num_attention_heads} * c.head_dim / c.o_groups},
        {"moe_intermediate_size", c.moe_intermediate_size},
    };
    for (const auto& [name, v] : ins)
      if (v <= 0 || v % ab != 0)
        p.add("{} = {} must be a positive multiple of the activation block {}", name, v, ab);
    if (v41 && c.head_dim % 32 != 0) p.add("head_dim {} must be a multiple of 32", c.head_dim);
    if (!v41 && c.nope_head_dim() % 64 != 0)
      p.add("head_dim - qk_rope_head_dim = {} must be a multiple of 64 (V4 window QDQ)", c.nope_head_dim());
  }
  // Layers and the DSpark tail.
  if (static_cast<int32_t>(c.compress_ratios.size()) < c.num_hidden_layers) {
    p.add("compress_ratios has {} entries, fewer than num_hidden_layers {}", c.compress_ratios.size(),
          c.num_hidden_layers);
    goto done;
  }
  for (size_t i = 0; i < c.compress_ratios.size(); ++i) {
    const int32_t r = c.compress_ratios[i];
    if (r < 0) p.add("compress_ratios[{}] = {} is negative", i, r);
    if (static_cast<int32_t>(i) >= c.num_hidden_layers && r != 0)
      p.add("compress_ratios[{}] = {}: DSpark stages must have ratio 0", i, r);
    if (!v41 && r != 0 && r != 4 && r < 8)
      p.add("compress_ratios[{}] = {}: V4 supports 4 (overlapped, indexed) or >= 8 (plain)", i, r);
  }
  if (!strictly_ascending(c.dspark_target_layer_ids)) p.add("dspark_target_layer_ids must be strictly ascending");
  for (int32_t id : c.dspark_target_layer_ids)
    if (id < 0 || id >= c.num_hidden_layers) p.add("dspark_target_layer_ids: {} is not a backbone layer", id);
  if (c.num_dspark_stages() > 0) {
    p.need(c.dspark_block_size > 0, "dspark_block_size must be positive");
    p.need(c.dspark_markov_rank > 0, "dspark_markov_rank must be positive");
    p.need(!c.dspark_target_layer_ids.empty(), "dspark_target_layer_ids must not be empty");
    p.need(c.dspark_noise_token_id >= 0 && c.dspark_noise_token_id < c.vocab_size,
           "dspark_noise_token_id must be a token id");
    if (c.dspark_n_routed_experts <= 0 || c.dspark_num_experts_per_tok < 1 ||
        c.dspark_num_experts_per_tok > c.dspark_n_routed_experts)
      p.add("dspark experts {} / per token {} are inconsistent", c.dspark_n_routed_experts,
            c.dspark_num_experts_per_tok);
  }
  if (v41) {
    if (c.num_hash_layers != 0) p.add("num_hash_layers {} is not supported for V4.1", c.num_hash_layers);
    if (c.num_dspark_stages() != c.num_nextn_predict_layers)
      p.add("compress_ratios has {} DSpark entries but num_nextn_predict_layers is {}",
            c.num_dspark_stages(), c.num_nextn_predict_layers);
    if (p.list.empty()) check_v41_roles(c, p);
    if (c.has_engram() || !c.engram_num_embeddings.empty()) check_engram(c, p);
    if (c.vision) {
      const VisionConfig& v = *c.vision;
      if (v.num_attention_heads <= 0 || v.hidden_size != v.num_attention_heads * 64)
        p.add("vision_config: hidden_size {} must be num_attention_heads {} x 64 (2-D RoPE layout)",
              v.hidden_size, v.num_attention_heads);
      p.need(v.num_hidden_layers > 0 && v.intermediate_size > 0 && v.patch_size > 0 && v.downsample_ratio > 0,
             "vision_config sizes must be positive");
    }
  } else {
    if (!c.kv_source_layer_ids.empty() || !c.index_source_layer_ids.empty() || c.candidate_source_layer_id >= 0)
      p.add("kv/index/candidate source lists are V4.1 keys; a deepseek_v4 config must not set them");
    if (c.has_engram()) p.add("engram_layer_ids is not supported for deepseek_v4");
    if (c.num_hash_layers < 0 || c.num_hash_layers > c.num_hidden_layers)
      p.add("num_hash_layers {} outside 0..num_hidden_layers", c.num_hash_layers);
    if (c.vision) p.add("vision_config is not supported for deepseek_v4");
  }
done:
  if (p.list.empty()) return ok_status();
  std::string msg = "config.json: unsupported or inconsistent values:";
  for (const auto& s : p.list) msg += "\n  - " + s;
  return Status(StatusCode::invalid_argument, msg);
}

}  // namespace dsv4::family
