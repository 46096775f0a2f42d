// build_plan: per-layer roles from the config's ratio and role lists (model-spec.md §2.3, §8).
#include "family/deepseek_v41/layer_plan.h"

#include <algorithm>

namespace dsv4::family {

std::string_view attn_kind_name(AttnKind k) {
  switch (k) {
    case AttnKind::window_only: return "window";
    case AttnKind::full: return "full";
    case AttnKind::reindex: return "reindex";
    case AttnKind::reuse: return "reuse";
    case AttnKind::v4_csa: return "csa";
    case AttnKind::v4_hca: return "hca";
  }
  return "?";
}

std::string LayerPlan::name() const {
  return is_dspark ? fmt::format("mtp.{}", dspark_stage) : fmt::format("layers.{}", id);
}

namespace {

int32_t index_of(const std::vector<int32_t>& v, int32_t x) {
  auto it = std::find(v.begin(), v.end(), x);
  return it == v.end() ? -1 : static_cast<int32_t>(it - v.begin());
}

void plan_v41_attention(const Config& c, LayerPlan& p, int32_t& newest_kv, int32_t& newest_index) {
  const int32_t l = p.id;
  p.kv_source = index_of(c.kv_source_layer_ids, l) >= 0;
  p.index_source = index_of(c.index_source_layer_ids, l) >= 0;
  if (p.kv_source) newest_kv = l;
  if (p.index_source) newest_index = l;
  if (p.compress_ratio == 0) return;
  p.kv_from = newest_kv;
  p.topk_from = newest_index;
  if (p.kv_source) {
    p.attn = AttnKind::full;
    p.compressor_gate = p.compress_ratio >= 2;
    p.compressor_fp32 = p.compress_ratio >= 2;
    p.owns_index_keys = true;
    p.index_keys_from = l;
    p.candidate_source = l == c.candidate_source_layer_id;
  } else if (p.index_source) {
    p.attn = AttnKind::reindex;
    p.index_keys_from = newest_kv;
  } else {
    p.attn = AttnKind::reuse;
  }
  // An index source after the candidate source restricts its scores to the candidates' blocks.
  p.uses_candidates = p.index_source && c.candidate_source_layer_id >= 0 && l > c.candidate_source_layer_id;
  p.candidate_from = p.uses_candidates ? c.candidate_source_layer_id : -1;
}

void plan_v4_attention(const Config& c, LayerPlan& p) {
  if (p.compress_ratio == 0) return;
  p.kv_source = true;
  p.kv_from = p.id;
  p.compressor_gate = true;
  p.compressor_fp32 = true;
  p.compressor_ape = true;
  if (p.compress_ratio == 4) {
    p.attn = AttnKind::v4_csa;
    p.compressor_overlap = true;
    p.index_source = true;
    p.owns_index_keys = true;
    p.index_keys_from = p.id;
    p.topk_from = p.id;
  } else {
    p.attn = AttnKind::v4_hca;
  }
}


// Sizes, numerics and row formats (model-spec.md §2.1; §8 for V4).
void plan_model(const Config& c, ModelPlan& m) {
  const bool v4 = c.variant == Variant::v4;
  m.variant = c.variant;
  m.vocab = c.vocab_size;
  m.dim = c.hidden_size;
  m.n_layers = c.num_hidden_layers;
  m.n_heads = c.num_attention_heads;
  m.head_dim = c.head_dim;
  m.rope_dim = c.qk_rope_head_dim;
  m.q_lora = c.q_lora_rank;
  m.o_lora = c.o_lora_rank;
  m.o_groups = c.o_groups;
  m.window = c.sliding_window;
  m.norm_eps = static_cast<float>(c.rms_norm_eps);
  m.weight_block = c.quant.weight_block_in;
  m.act_block = c.act_block();
  m.n_experts = c.n_routed_experts;
  m.n_active = c.num_experts_per_tok;
  m.moe_inter = c.moe_intermediate_size;
  m.route_scale = static_cast<float>(c.routed_scaling_factor);
  m.swiglu_limit = static_cast<float>(c.swiglu_limit);
  m.compress_ratios.assign(c.compress_ratios.begin(), c.compress_ratios.begin() + c.num_hidden_layers);
  m.candidate_topk_blocks = c.candidate_topk_blocks;
  m.candidate_block_size = c.candidate_block_size;
  m.index_heads = c.index_n_heads;
  m.index_head_dim = c.index_head_dim;
  m.index_topk = c.index_topk;
  m.hc_mult = c.hc_mult;
  m.hc_sinkhorn_iters = c.hc_sinkhorn_iters;
  m.hc_eps = static_cast<float>(c.hc_eps);
  m.rope_theta = c.rope_theta;
  m.compress_rope_theta = c.compress_rope_theta;
  m.rope_factor = c.rope_scaling.factor;
  m.beta_fast = c.rope_scaling.beta_fast;
  m.beta_slow = c.rope_scaling.beta_slow;
  m.original_seq_len = c.rope_scaling.original_max_position_embeddings;
  m.engram_layers.assign(c.engram_layer_ids.begin(), c.engram_layer_ids.end());
  m.engram_max_ngram = c.engram_max_ngram_size;
  m.engram_heads = c.engram_n_heads;
  m.engram_head_dim = c.engram_head_dim;
  m.engram_vocab_size = c.engram_vocab_size;
  m.engram_pad_id = static_cast<int32_t>(c.engram_pad_token_id);
  m.dspark_block = c.dspark_block_size;
  m.dspark_noise_token = static_cast<int32_t>(c.dspark_noise_token_id);
  m.dspark_markov_rank = c.dspark_markov_rank;
  m.dspark_experts = c.dspark_n_routed_experts;
  m.dspark_active = c.dspark_num_experts_per_tok;
  // The 0731 drafter's forward is not confirmed by reference code (model-spec.md §10.7): its stages are
  // checked and listed, not run.
  if (!v4) {
    m.dspark_stages = c.num_dspark_stages();
    m.dspark_target_layers.assign(c.dspark_target_layer_ids.begin(), c.dspark_target_layer_ids.end());
  }
  set_variant_numerics(m, c.variant);
  m.num_hash_layers = v4 ? c.num_hash_layers : 0;
}

}  // namespace

void set_variant_numerics(ModelPlan& m, Variant variant) {
  const bool v4 = variant == Variant::v4;
  m.variant = variant;
  m.premix = v4 ? HcPremix::own : HcPremix::carried;
  m.q_head_norm = v4;
  m.index_hadamard = v4;
  m.topk_by_score = v4;
  m.route_norm_always = v4;
  m.router_eps = v4 ? 0.0f : 1e-20f;
  m.shared_clamp = true;
  m.reference_window_pads_first = !v4;
  // V4.1: FP8 window rows, FP4 compressed rows (model-spec.md §4.2); V4: MODEL1 rows for both (§8).
  m.window_format = v4 ? KvRowFormat::model1 : KvRowFormat::fp8_ue8m0_32;
  m.compressed_format = v4 ? KvRowFormat::model1 : KvRowFormat::fp4_e4m3_16;
  m.index_format = KvRowFormat::fp4_ue8m0_32;
}

ModelPlan build_plan(const Config& c) {
  ModelPlan plan;
  plan_model(c, plan);
  int32_t newest_kv = -1, newest_index = -1;
  for (int32_t l = 0; l < c.num_all_layers(); ++l) {
    LayerPlan p;
    p.id = l;
    p.is_dspark = l >= c.num_hidden_layers;
    p.dspark_stage = p.is_dspark ? l - c.num_hidden_layers : -1;
    p.compress_ratio = c.compress_ratios[l];
    p.rope_base = p.compress_ratio > 0 ? c.compress_rope_theta : c.rope_theta;
    p.yarn = p.compress_ratio > 0;
    p.n_routed_experts = p.is_dspark ? c.dspark_n_routed_experts : c.n_routed_experts;
    p.num_experts_per_tok = p.is_dspark ? c.dspark_num_experts_per_tok : c.num_experts_per_tok;
    if (!p.is_dspark) {
      if (c.variant == Variant::v41) plan_v41_attention(c, p, newest_kv, newest_index);
      else plan_v4_attention(c, p);
      p.engram_index = index_of(c.engram_layer_ids, l);
      p.engram = p.engram_index >= 0;
      p.dspark_tap_index = index_of(plan.dspark_target_layers, l);
      p.dspark_tap = p.dspark_tap_index >= 0;
      p.hash_routed = l < plan.num_hash_layers;
      if (p.kv_source) plan.kv_cache_layers.push_back(l);
      if (p.owns_index_keys) plan.index_key_layers.push_back(l);
      plan.layers.push_back(p);
    } else {
      plan.dspark.push_back(p);
    }
  }
  return plan;
}

Status check_plan(const ModelPlan& p) {
  if (p.act_block < 0 || (p.act_block > 0 && p.act_block % 32 != 0))
    return error(StatusCode::invalid_argument, "activation block {} unsupported", p.act_block);
  if (p.head_dim % 32 != 0 || p.rope_dim > p.head_dim || p.rope_dim % 2 != 0)
    return error(StatusCode::invalid_argument, "head_dim {} / rope_dim {} unsupported", p.head_dim, p.rope_dim);
  if (p.index_head_dim % 32 != 0 || p.index_head_dim < p.rope_dim)
    return error(StatusCode::invalid_argument, "index_head_dim {} unsupported", p.index_head_dim);
  const int ab = p.act_block > 0 ? p.act_block : 32;
  if (p.dim % ab != 0 || p.q_lora % ab != 0 || (p.o_lora * p.o_groups) % ab != 0 || p.moe_inter % 32 != 0)
    return error(StatusCode::invalid_argument, "dims must be multiples of the {}-element block", ab);
  if (p.n_heads % p.o_groups != 0)
    return error(StatusCode::invalid_argument, "n_heads {} not divisible by o_groups {}", p.n_heads, p.o_groups);
  if (p.hc_mult < 1 || p.hc_mult > 8) return error(StatusCode::invalid_argument, "hc_mult {} unsupported", p.hc_mult);
  for (const LayerPlan& r : p.layers) {
    const int l = r.id, ratio = r.compress_ratio;
    if (ratio > 0 && r.kv_from < 0)
      return error(StatusCode::invalid_argument, "layer {} has ratio {} but no KV source at or before it", l, ratio);
    if (ratio > 0 && p.compress_ratios[r.kv_from] != ratio)
      return error(StatusCode::invalid_argument, "layer {} ratio {} differs from its KV source {}", l, ratio, r.kv_from);
    if (r.kv_source && ratio <= 0) return error(StatusCode::invalid_argument, "KV source layer {} has ratio 0", l);
    switch (r.attn) {
      case AttnKind::full:
      case AttnKind::reindex:
      case AttnKind::reuse:
        if (r.topk_from < 0)
          return error(StatusCode::invalid_argument, "layer {} has ratio {} but no index source at or before it", l, ratio);
        if (ratio > 2) return error(StatusCode::unimplemented, "layer {}: ratio {} with shared sources (1 and 2 are)", l, ratio);
        break;
      case AttnKind::v4_hca:
        if (ratio > 256) return error(StatusCode::unimplemented, "layer {}: compress ratio {} above 256", l, ratio);
        if (ratio < 2)
          return error(StatusCode::unimplemented, "layer {}: compress ratio {} (4 with an indexer, larger without)", l, ratio);
        break;
      case AttnKind::v4_csa:
      case AttnKind::window_only: break;
    }
  }
  if (p.window_format == KvRowFormat::model1 && (p.head_dim - p.rope_dim) % 64 != 0)
    return error(StatusCode::invalid_argument, "MODEL1 KV rows need head_dim - rope_dim ({}) a multiple of 64",
                 p.head_dim - p.rope_dim);
  if (p.index_hadamard && (p.index_head_dim & (p.index_head_dim - 1)) != 0)
    return error(StatusCode::invalid_argument, "index_head_dim {} is not a power of two (Hadamard)", p.index_head_dim);
  for (int t : p.dspark_target_layers)
    if (t < 0 || t >= p.n_layers) return error(StatusCode::invalid_argument, "DSpark target layer {} out of range", t);
  for (int e : p.engram_layers)
    if (e < 0 || e >= p.n_layers) return error(StatusCode::invalid_argument, "Engram layer {} out of range", e);
  return ok_status();
}

ModelPlan without_quantization(ModelPlan p) {
  p.act_block = 0;
  p.window_format = p.compressed_format = p.index_format = KvRowFormat::bf16;
  return p;
}

std::string format_plan(const ModelPlan& plan) {
  std::string out = "layer      ratio attn     kv_from topk_from keys_from flags                    rope\n";
  auto row = [&](const LayerPlan& p) {
    std::string flags;
    auto add = [&](bool on, const char* f) {
      if (on) flags += flags.empty() ? f : std::string(",") + f;
    };
    add(p.kv_source, "kv-src");
    add(p.index_source, "idx-src");
    add(p.candidate_source, "cand-src");
    add(p.uses_candidates, "cand");
    add(p.engram, "engram");
    add(p.dspark_tap, "tap");
    add(p.hash_routed, "hash");
    add(p.is_dspark, "dspark");
    auto id = [](int32_t v) { return v < 0 ? std::string("-") : std::to_string(v); };
    out += fmt::format("{:<10} {:>5} {:<8} {:>7} {:>9} {:>9} {:<24} {:g}{}  experts {}/{}\n", p.name(),
                       p.compress_ratio, attn_kind_name(p.attn), id(p.kv_from), id(p.topk_from),
                       id(p.index_keys_from), flags.empty() ? "-" : flags, p.rope_base,
                       p.yarn ? "+yarn" : "", p.num_experts_per_tok, p.n_routed_experts);
  };
  for (const auto& p : plan.layers) row(p);
  for (const auto& p : plan.dspark) row(p);
  return out;
}

}  // namespace dsv4::family
