// ModelConfig validation and the per-layer role table (see model_config.h).
#include "backends/cpu/model_config.h"

#include <algorithm>

namespace dsv4::cpu {

namespace {
bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }
}  // namespace

Status ModelConfig::validate() const {
  if (variant != Variant::v41)
    return error(StatusCode::unimplemented, "the CPU oracle implements the V4.1 forward only");
  if (static_cast<int>(compress_ratios.size()) < n_layers)
    return error(StatusCode::invalid_argument, "compress_ratios has {} entries for {} layers",
                 compress_ratios.size(), n_layers);
  if (head_dim % 32 != 0 || rope_dim > head_dim || rope_dim % 2 != 0)
    return error(StatusCode::invalid_argument, "head_dim {} / rope_dim {} unsupported", head_dim, rope_dim);
  if (index_head_dim % 32 != 0 || index_head_dim < rope_dim)
    return error(StatusCode::invalid_argument, "index_head_dim {} unsupported", index_head_dim);
  if (dim % act_block != 0 || q_lora % act_block != 0 || (o_lora * o_groups) % act_block != 0 ||
      moe_inter % 32 != 0)
    return error(StatusCode::invalid_argument, "dims must be multiples of the {}-element block", act_block);
  if (n_heads % o_groups != 0)
    return error(StatusCode::invalid_argument, "n_heads {} not divisible by o_groups {}", n_heads, o_groups);
  if (hc_mult < 1 || hc_mult > 8) return error(StatusCode::invalid_argument, "hc_mult {} unsupported", hc_mult);
  auto roles = layer_roles(*this);
  for (int l = 0; l < n_layers; ++l) {
    const LayerRole& r = roles[l];
    if (r.ratio > 0 && r.kv_from < 0)
      return error(StatusCode::invalid_argument, "layer {} has ratio {} but no KV source at or before it", l, r.ratio);
    if (r.ratio > 0 && r.index_from < 0)
      return error(StatusCode::invalid_argument, "layer {} has ratio {} but no index source at or before it", l, r.ratio);
    if (r.ratio > 0 && compress_ratios[r.kv_from] != r.ratio)
      return error(StatusCode::invalid_argument, "layer {} ratio {} differs from its KV source {}", l, r.ratio, r.kv_from);
    if (r.kv_source && r.ratio <= 0)
      return error(StatusCode::invalid_argument, "KV source layer {} has ratio 0", l);
    if (r.ratio > 2) return error(StatusCode::unimplemented, "layer {}: ratio {} (V4.1 uses 1 and 2)", l, r.ratio);
  }
  for (int t : dspark_target_layers)
    if (t < 0 || t >= n_layers) return error(StatusCode::invalid_argument, "DSpark target layer {} out of range", t);
  for (int e : engram_layers)
    if (e < 0 || e >= n_layers) return error(StatusCode::invalid_argument, "Engram layer {} out of range", e);
  return ok_status();
}

std::vector<LayerRole> layer_roles(const ModelConfig& c) {
  std::vector<LayerRole> roles(c.n_layers);
  int last_kv = -1, last_index = -1;
  for (int l = 0; l < c.n_layers; ++l) {
    LayerRole& r = roles[l];
    r.ratio = l < static_cast<int>(c.compress_ratios.size()) ? c.compress_ratios[l] : 0;
    if (r.ratio > 0) {
      r.kv_source = contains(c.kv_source_layers, l);
      r.index_source = contains(c.index_source_layers, l);
      r.candidate_source = l == c.candidate_source_layer;
      r.uses_candidates = r.index_source && c.candidate_source_layer >= 0 && l > c.candidate_source_layer;
      if (r.kv_source) last_kv = l;
      if (r.index_source) last_index = l;
      r.kv_from = last_kv;
      r.index_from = last_index;
    }
    for (size_t i = 0; i < c.engram_layers.size(); ++i)
      if (c.engram_layers[i] == l) { r.engram = true; r.engram_index = static_cast<int>(i); }
    for (size_t i = 0; i < c.dspark_target_layers.size(); ++i)
      if (c.dspark_target_layers[i] == l) r.tap_index = static_cast<int>(i);
  }
  return roles;
}

}  // namespace dsv4::cpu
