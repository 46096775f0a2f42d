// Layer roles: the distinct kinds of work the plan gives its layers, named, each with a representative layer
// (`dsv4 bench --roles` times one layer of each).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "family/deepseek_v41/layer_plan.h"

namespace dsv4::family {

// The role of one layer: its attention kind (attn_kind_name), "-r<ratio>" when it compresses, then a
// "+flag" for each of these that holds:
//   cand-src  publishes candidate blocks (V4.1 layer 20)
//   cand      restricts its index scores to the candidate blocks (V4.1 re-indexing layers)
//   engram    applies Engram before its block (V4.1 layers 1, 14)
//   hash      routes its experts by token id (V4 / 0731 layers below num_hash_layers)
// and "dspark" for a drafter stage. The released plans' roles:
//   V4.1:  window, window+engram, full-r2, reuse-r2, full-r2+engram, full-r1+cand-src, reuse-r1,
//          reindex-r1+cand, dspark
//   0731:  window+hash, csa-r4+hash, hca-r128, csa-r4, dspark
// Properties that do not change a layer's work (the DSpark tap, rope base) are not part of it.
std::string layer_role(const LayerPlan& p);

// One role and the first layer that has it.
struct RoleLayer {
  std::string role;
  int32_t layer = -1;  // plan id: backbone 0..n_layers-1, or n_layers + stage for "dspark" (stage 0)
};

// Every role of `plan`, in the order of their first layers; "dspark" last when the plan lists stages.
std::vector<RoleLayer> plan_roles(const ModelPlan& plan);

}  // namespace dsv4::family
