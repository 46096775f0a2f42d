// Test helper: the vision tensors of a config (tower, aligner, image delimiters) with the bytes `dsv4 synth`
// writes for them (synth_rows of the same seed), held in memory, optionally with one left out.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/tensor_store.h"
#include "family/deepseek_v41/synth_values.h"
#include "family/deepseek_v41/tensors.h"

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

}  // namespace dsv4::family::vision_testing
