// Test helpers: the vision tensors of a config (tower, aligner, image delimiters) with the bytes `dsv4 synth`
// writes for them (synth_rows of the same seed), held in memory, optionally with one left out; and a preset's
// V4.1 config with those tensors bound as the tower's weights.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/tensor_store.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/synth_values.h"
#include "family/deepseek_v41/tensors.h"
#include "family/deepseek_v41/vision_weights.h"

namespace dsv4::family::vision_testing {

inline std::shared_ptr<MemoryTensors> synthetic_vision_store(const Config& c, uint64_t seed,
                                                            std::string_view leave_out = {}) {
  auto store = std::make_shared<MemoryTensors>("synthetic vision");
  const TensorTable table = expected_tensors(c);
  for (const TensorSpec& t : table.tensors) {
    if (!is_vision_tensor(t.name) || t.name == leave_out) continue;
    Status s = store->add(t.name, t.dtype, t.shape, synth_rows(c, table, t, seed, 0, t.shape[0]));
    if (!s.ok()) return nullptr;
  }
  return store;
}

struct SyntheticVision {
  Config config;
  std::shared_ptr<MemoryTensors> store;  // holds the bytes `weights` views
  VisionWeights weights;
};
inline StatusOr<SyntheticVision> synthetic_vision(Preset p, uint64_t seed) {
  SyntheticVision v;
  v.config = preset_config(p, Variant::v41);
  v.store = synthetic_vision_store(v.config, seed);
  if (!v.store) return error(StatusCode::internal, "synthetic vision tensors of seed {}", seed);
  DSV4_ASSIGN_OR_RETURN(v.weights, bind_vision_weights(v.config, *v.store));
  return v;
}

}  // namespace dsv4::family::vision_testing
