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
    p.uses_candidates = true;
    p.candidate_from = c.candidate_source_layer_id;
  } else {
    p.attn = AttnKind::reuse;
  }
}

void plan_v4_attention(const Config& c, LayerPlan& p) {
  if (p.compress_ratio == 0) return;
  p.kv_source = true;
  p.kv_from = p.id;
  p.compressor_gate = true;
  p.compressor_fp32 = true;
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

}  // namespace

ModelPlan build_plan(const Config& c) {
  ModelPlan plan;
  plan.variant = c.variant;
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
      p.dspark_tap_index = index_of(c.dspark_target_layer_ids, l);
      p.dspark_tap = p.dspark_tap_index >= 0;
      p.hash_routed = c.variant == Variant::v4 && l < c.num_hash_layers;
      if (p.kv_source) plan.kv_cache_layers.push_back(l);
      if (p.owns_index_keys) plan.index_key_layers.push_back(l);
      plan.layers.push_back(p);
    } else {
      plan.dspark.push_back(p);
    }
  }
  return plan;
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
