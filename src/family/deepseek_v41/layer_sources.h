// Which backbone layers a layer reads state from: what a cut of the plan (with_layer_ids) must keep with it.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "family/deepseek_v41/layer_plan.h"

namespace dsv4::family {

// One earlier layer a layer reads from, and what it reads.
struct LayerSource {
  int32_t layer = -1;
  std::string_view what;  // "compressed KV rows", "top-k", "index keys", "candidate blocks", "Engram primes"
};

// The layers backbone layer `id` of `plan` reads from, each once (the first reason), ascending; never itself:
//   - V4.1 (model-spec.md §2.3): kv_from (the compressed-KV rows it attends to), topk_from (the top-k that
//     selects them), index_keys_from (the keys a re-indexing layer scores), candidate_from (the blocks its
//     scores are restricted to);
//   - an Engram layer: every earlier Engram layer (its hash primes continue after theirs, engram_layout.h);
//   - V4 / 0731: none (every compressed layer owns its compressor and indexer; hash routing is per layer).
// DSpark taps are not sources: a cut re-targets them (with_layers.h).
std::vector<LayerSource> layer_sources(const ModelPlan& plan, int32_t id);

// `ids` (backbone layer ids, any order, repeats allowed) with every source they read from, transitively:
// ascending, unique. Refused (invalid_argument): an id outside 0..n_layers-1.
StatusOr<std::vector<int32_t>> close_layer_ids(const ModelPlan& plan, std::vector<int32_t> ids);

// ok when every source of every layer in `ids` is in `ids`; else invalid_argument naming the first kept layer,
// what it reads and the dropped layer it reads it from.
Status check_layer_ids_closed(const ModelPlan& plan, const std::vector<int32_t>& ids);

}  // namespace dsv4::family
