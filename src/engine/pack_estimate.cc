// Stored tensors of a hypothetical EXL3 pack (see pack_estimate.h).
#include "engine/pack_estimate.h"

namespace dsv4::engine {

StatusOr<std::vector<StoredTensor>> exl3_pack_estimate(const family::Exl3PackPlan& plan, int bits) {
  if (bits < 1 || bits > 8) return error(StatusCode::invalid_argument, "EXL3 width {} bits (1 to 8)", bits);
  std::vector<StoredTensor> out;
  for (const family::Exl3Group& g : plan.groups) {
    out.push_back({g.prefix + ".trellis", g.in_padded * g.out_padded * bits / 8});
    out.push_back({g.prefix + ".suh", 2 * g.in_padded});
    out.push_back({g.prefix + ".svh", 2 * g.out_padded});
  }
  for (const auto* list : {&plan.native, &plan.native_optional, &plan.release_shards})
    for (size_t i : *list) out.push_back({plan.release.tensors[i].name, plan.release.tensors[i].bytes()});
  return out;
}

}  // namespace dsv4::engine
