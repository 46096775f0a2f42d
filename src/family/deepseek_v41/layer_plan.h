// The layer plan: every layer's roles as data (model-spec.md §2.3 for V4.1, §8 for V4), built from Config.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "family/deepseek_v41/config.h"

namespace dsv4::family {

// What a layer's attention does beyond its sliding window.
enum class AttnKind : uint8_t {
  window_only,  // compress_ratio 0: sliding window only (V4.1 layers 0, 1; V4 layers 0, 1; DSpark stages)
  full,         // V4.1 KV + index source: own compressor, own index keys, own top-k (2, 8, 14, 20)
  reindex,      // V4.1 index source without KV: own index query over the KV source's keys,
                //   restricted to the candidate source's blocks (24, 28, 32, 36)
  reuse,        // V4.1: newest KV source's compressed KV + newest index source's top-k
  v4_csa,       // V4 ratio 4: own overlapped compressor + own indexer (with its own compressor, Hadamard)
  v4_hca,       // V4 other ratios (128): own plain compressor, attends to every visible compressed row
};

std::string_view attn_kind_name(AttnKind k);  // "window", "full", "reindex", "reuse", "csa", "hca"

// One layer (backbone or DSpark stage). Layer ids of sources refer to backbone layers; -1 = none.
struct LayerPlan {
  int32_t id = 0;                 // 0..L-1 backbone, L + s for DSpark stage s
  bool is_dspark = false;
  int32_t dspark_stage = -1;      // 0.. for DSpark stages
  int32_t compress_ratio = 0;
  AttnKind attn = AttnKind::window_only;

  // Compressed-KV side.
  bool kv_source = false;         // owns a compressor writing compressed-KV rows (V4: every ratio>0 layer)
  bool compressor_gate = false;   // compressor has wgate (V4.1 ratio >= 2; V4 always)
  bool compressor_fp32 = false;   // compressor projections in fp32 (V4.1 ratio >= 2; V4 always)
  bool compressor_overlap = false;// V4 ratio 4: 2x-wide wkv/wgate pooling 2 groups, with ape
  int32_t kv_from = -1;           // layer whose compressed-KV rows this layer attends to (self if source)

  // Index side.
  bool index_source = false;      // runs an indexer query and publishes its own top-k
  bool owns_index_keys = false;   // computes/stores index-key rows (V4.1: KV+index source; V4: csa)
  bool candidate_source = false;  // publishes candidate blocks (V4.1 layer 20)
  bool uses_candidates = false;   // masks its scores by candidate_from's candidates (reindex)
  int32_t index_keys_from = -1;   // layer whose index keys the scores read (self if owner)
  int32_t topk_from = -1;         // layer whose top-k list selects this layer's compressed rows
  int32_t candidate_from = -1;

  // Everything else.
  bool engram = false;            // Engram applied to the stream before this layer's block
  int32_t engram_index = -1;      // position in engram_layer_ids
  bool dspark_tap = false;        // the stream entering this layer feeds the DSpark main_proj
  int32_t dspark_tap_index = -1;  // position in dspark_target_layer_ids
  bool hash_routed = false;       // V4 layers [0, num_hash_layers): experts from tid2eid
  int32_t n_routed_experts = 0;
  int32_t num_experts_per_tok = 0;
  double rope_base = 0;           // rope_theta (ratio 0) or compress_rope_theta (ratio > 0)
  bool yarn = false;              // YaRN frequency scaling (ratio > 0 only)

  std::string name() const;       // "layers.7" or "mtp.1": the tensor-name prefix
};

struct ModelPlan {
  Variant variant = Variant::v41;
  std::vector<LayerPlan> layers;  // backbone, index = layer id
  std::vector<LayerPlan> dspark;  // DSpark stages, index = stage
  // Backbone layers that own compressed-KV caches / index-key caches, ascending.
  std::vector<int32_t> kv_cache_layers;
  std::vector<int32_t> index_key_layers;

  const LayerPlan& layer(int32_t id) const {
    const int32_t n = static_cast<int32_t>(layers.size());
    return id < n ? layers[id] : dspark[id - n];
  }
};

// Builds the plan from a validated config (call validate_config first; parse_config does).
ModelPlan build_plan(const Config& c);

// A human-readable table, one line per layer (used by `dsv4 inspect`).
std::string format_plan(const ModelPlan& plan);

}  // namespace dsv4::family
