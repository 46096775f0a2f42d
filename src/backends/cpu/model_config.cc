// ModelConfig validation and the per-layer role table (see model_config.h).
#include "backends/cpu/model_config.h"

#include <algorithm>

namespace dsv4::cpu {

namespace {
bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }
}  // namespace

Status ModelConfig::validate() const {
  if (v4() && (!engram_layers.empty() || !kv_source_layers.empty()))
    return error(StatusCode::invalid_argument, "V4 has per-layer compressors and no Engram / shared KV sources");
  if (act_block < 0 || (act_block > 0 && act_block % 32 != 0))
    return error(StatusCode::invalid_argument, "activation block {} unsupported", act_block);
  if (static_cast<int>(compress_ratios.size()) < n_layers)
    return error(StatusCode::invalid_argument, "compress_ratios has {} entries for {} layers",
                 compress_ratios.size(), n_layers);
  if (head_dim % 32 != 0 || rope_dim > head_dim || rope_dim % 2 != 0)
    return error(StatusCode::invalid_argument, "head_dim {} / rope_dim {} unsupported", head_dim, rope_dim);
  if (index_head_dim % 32 != 0 || index_head_dim < rope_dim)
    return error(StatusCode::invalid_argument, "index_head_dim {} unsupported", index_head_dim);
  const int ab = act_block > 0 ? act_block : 32;
  if (dim % ab != 0 || q_lora % act_block != 0 || (o_lora * o_groups) % ab != 0 ||
      moe_inter % 32 != 0)
    return error(StatusCode::invalid_argument, "dims must be multiples of the {}-element block", ab);
  if (n_heads % o_groups != 0)
    return error(StatusCode::invalid_argument, "n_heads {} not divisible by o_groups {}", n_heads, o_groups);
  if (hc_mult < 1 || hc_mult > 8) return error(StatusCode::invalid_argument, "hc_mult {} unsupported", hc_mult);
  auto roles = layer_roles(*this);
  for (int l = 0; l < n_layers; ++l) {
    const LayerRole& r = roles[l];
    if (r.ratio > 0 && r.kv_from < 0)
      return error(StatusCode::invalid_argument, "layer {} has ratio {} but no KV source at or before it", l, r.ratio);
    if (r.ratio > 0 && r.index_from < 0 && !v4())
      return error(StatusCode::invalid_argument, "layer {} has ratio {} but no index source at or before it", l, r.ratio);
    if (r.ratio > 0 && compress_ratios[r.kv_from] != r.ratio)
      return error(StatusCode::invalid_argument, "layer {} ratio {} differs from its KV source {}", l, r.ratio, r.kv_from);
    if (r.kv_source && r.ratio <= 0)
      return error(StatusCode::invalid_argument, "KV source layer {} has ratio 0", l);
    if (!v4() && r.ratio > 2) return error(StatusCode::unimplemented, "layer {}: ratio {} (V4.1 uses 1 and 2)", l, r.ratio);
    if (v4() && r.ratio > 256)
      return error(StatusCode::unimplemented, "layer {}: V4 compress ratio {} above 256", l, r.ratio);
    if (v4() && r.ratio > 0 && r.ratio < 2)
      return error(StatusCode::unimplemented, "layer {}: V4 compress ratio {} (4 with an indexer, larger without)", l, r.ratio);
  }
  if (v4() && (head_dim - rope_dim) % 64 != 0)
    return error(StatusCode::invalid_argument, "V4 KV rows need head_dim - rope_dim ({}) a multiple of 64", head_dim - rope_dim);
  if (v4() && (index_head_dim & (index_head_dim - 1)) != 0)
    return error(StatusCode::invalid_argument, "V4 index_head_dim {} is not a power of two (Hadamard)", index_head_dim);
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
    r.hash_routed = c.v4() && l < c.num_hash_layers;
    if (c.v4()) {
      // Every compressed layer owns its compressor; ratio 4 also its indexer (model-spec.md §8).
      if (r.ratio > 0) {
        r.kv_source = true;
        r.kv_from = l;
        r.overlap = r.ratio == 4;
        r.index_source = r.overlap;
        r.index_from = r.overlap ? l : -1;
      }
    } else if (r.ratio > 0) {
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

void apply_v4_numerics(ModelConfig& c) {
  c.variant = Variant::v4;
  c.router_eps = 0.0f;
  c.shared_clamp = true;
  c.window_format = RowFormat::fp8_nope64_bf16rope;
  c.compressed_format = RowFormat::fp8_nope64_bf16rope;
  c.index_format = RowFormat::fp4_ue8m0_32;
}

ModelConfig without_quantization(ModelConfig c) {
  c.act_block = 0;
  c.window_format = c.compressed_format = c.index_format = RowFormat::bf16;
  return c;
}

}  // namespace dsv4::cpu
