// Which stored weight bytes each tensor-parallel rank holds on its GPU, and which stay on the host.
//
// Built from the stored tensors (a release checkpoint's, or an EXL3 pack's own plus the release's Engram
// tables) and the split plan of the release table (fabric/split_plan.h, expert_parallel), with the
// departures the rank cut makes (fabric/rank_weights.h) and the device formats of the upload:
// - a release tensor follows its plan entry: replicated on every rank; split by rows (its slice's share
//   of the bytes); owned (a routed expert: whole on its owner); host (Engram tables);
// - an EXL3 pack's tensors follow their release linear's entry: an expert's trellis, suh, svh on its
//   owner; a row-split linear (wq_b heads, the head's vocabulary) cut along EXL3's out dimension
//   (trellis, svh, bias by the slice's share; suh whole on every rank), kept whole on every rank when a
//   slice would not fall on 128-column blocks (the head at TP 4 and 8); wo_a's per-group slices
//   `attn.wo_a.slice.g` whole on the rank holding group g;
// - the DSpark Markov head's embedding and head stay whole on every rank (rank_weights.h);
// - a release `attn.wo_a` is held as bf16 on the device (dequantized from FP8 at load, as the
//   reference's convert.py does: model-spec.md §5.2): 2 bytes per weight, no scales;
// - the vision tower, aligner and image delimiters are not loaded (the text model does not read them);
// - the DSpark stages (`mtp.*`) count only when the drafter is uploaded.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "fabric/split_plan.h"
#include "family/deepseek_v41/config.h"
#include "family/deepseek_v41/exl3_layout.h"
#include "family/deepseek_v41/tensors.h"

namespace dsv4::engine {

struct StoredTensor {
  std::string name;
  int64_t bytes = 0;
};

// The release checkpoint's stored tensors (family::expected_tensors): names and payload bytes.
std::vector<StoredTensor> release_tensors(const family::TensorTable& table);

struct WeightShare {
  std::vector<int64_t> rank_device;   // [tp] device bytes of each rank (drafter included when uploaded)
  std::vector<int64_t> rank_drafter;  // [tp] of which DSpark stages
  int64_t host_engram = 0;            // Engram tables and their scales (one copy per host)
  int64_t not_loaded = 0;             // vision tower, aligner, image delimiters; a pack's unused weight copies
  int64_t drafter_not_loaded = 0;     // the DSpark stages when the drafter is not uploaded
  int64_t stored = 0;                 // every stored byte given
};

// `release`: the release table of the config; `plan`: make_split_plan over it (expert_parallel). `pack`: the
// tensors are an EXL3 pack's of this layout (names not in the release table map to their release linear);
// null for a release checkpoint. Refuses a tensor it cannot place (invalid_argument naming it).
StatusOr<WeightShare> share_weights(const family::Config& c, const family::TensorTable& release,
                                    const fabric::SplitPlan& plan, const std::vector<StoredTensor>& tensors,
                                    const family::Exl3PackPlan* pack, bool drafter);

}  // namespace dsv4::engine
