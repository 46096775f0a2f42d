// Model: one checkpoint (release layout or EXL3 pack) or in-memory weights as every backend executes it —
// config, layer plan, tensor table, the stored tensors and their typed views, the Engram hash layout and token
// map. Opening reads headers and small tables only; no weight byte is decoded or copied.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor_store.h"
#include "family/deepseek_v41/config.h"
#include "family/deepseek_v41/engram_layout.h"
#include "family/deepseek_v41/layer_plan.h"
#include "family/deepseek_v41/tensors.h"
#include "family/deepseek_v41/weights.h"

namespace dsv4::family {

struct Model {
  std::string path;                  // checkpoint directory; empty for weights held in memory
  Config config;
  ModelPlan plan;
  TensorTable table;                 // the release layout's table (an EXL3 pack stands for it)
  bool exl3_pack = false;            // linears of the Mia layout are EXL3 groups
  std::shared_ptr<const TensorStore> store;                // what the views point into
  std::vector<std::shared_ptr<const TensorStore>> extra;   // further stores views point into: an EXL3 pack's
                                                           // release shards (Engram tables), bytes a test replaced
  ModelWeights weights;  // what the text forward reads; the vision tower binds apart, on demand (vision_weights.h)
  // The Engram hash layout (model-spec.md §3.4): derived from the config for checkpoints; synthetic weights
  // draw their own multipliers. Empty without Engram layers.
  EngramLayout engram;
  std::vector<int32_t> engram_token_map;  // raw id -> compressed id [vocab]; empty without Engram layers
  std::vector<std::string> notes;         // checks that could not be made (no digest recorded), for the user

  // The plan's layer l (backbone, or L + s for DSpark stage s) and its weights.
  const LayerWeights& layer_weights(int32_t l) const {
    const int32_t n = static_cast<int32_t>(weights.layers.size());
    return l < n ? weights.layers[l] : weights.dspark[l - n];
  }
};

struct OpenOptions {
  // EXL3 packs (quantization_config.quant_method "exl3", Mia layout, formats.md §1.12): the directory holding
  // the original release shards with the Engram tables, checked against the pack's engram_shards.json (or the
  // built-in V4.1-Flash record) before use. Unused for other checkpoints.
  std::string engram_shards;
};

// Reads `dir`/config.json, checks every tensor against the expected table (one error listing all mismatches;
// for a pack, against the Mia layout), binds the views and reads the small tables the forward needs (the
// Engram token map from `dir`/engram_token_map.json or derived from the V4.1 tokenizer; hash-routing tables
// checked in range).
StatusOr<std::shared_ptr<const Model>> open_model(const std::string& dir, const OpenOptions& options = {});

// A model over tensors already in `store` (synthetic or re-encoded weights): binds the plan's views and takes
// `engram` / `token_map` as given (required with Engram layers). With exl3_pack, linears of the Mia layout are
// read as the pack's EXL3 groups (the store may also hold the Engram tables). A release-layout store is checked
// against the table like a checkpoint.
StatusOr<std::shared_ptr<const Model>> model_from_store(const Config& c, std::shared_ptr<const TensorStore> store,
                                                        EngramLayout engram, std::vector<int32_t> token_map,
                                                        bool exl3_pack = false);

// Checks what the forward trusts without reading weights: every V4 hash-routing id (tid2eid) names an expert.
Status check_routing_tables(const Model& m);

}  // namespace dsv4::family
