// layer_roles: role names from the plan's per-layer fields (see layer_roles.h).
#include "family/deepseek_v41/layer_roles.h"

#include <algorithm>

namespace dsv4::family {

std::string layer_role(const LayerPlan& p) {
  if (p.is_dspark) return "dspark";
  std::string r(attn_kind_name(p.attn));
  if (p.compress_ratio > 0) r += fmt::format("-r{}", p.compress_ratio);
  struct Flag {
    bool on;
    const char* name;
  };
  for (const Flag& f : {Flag{p.candidate_source, "cand-src"}, Flag{p.uses_candidates, "cand"}, Flag{p.engram, "engram"},
                        Flag{p.hash_routed, "hash"}})
    if (f.on) r += std::string("+") + f.name;
  return r;
}

std::vector<RoleLayer> plan_roles(const ModelPlan& plan) {
  std::vector<RoleLayer> out;
  for (const LayerPlan& p : plan.layers) {
    std::string r = layer_role(p);
    if (std::none_of(out.begin(), out.end(), [&](const RoleLayer& x) { return x.role == r; }))
      out.push_back({std::move(r), p.id});
  }
  if (!plan.dspark.empty()) out.push_back({layer_role(plan.dspark.front()), plan.dspark.front().id});
  return out;
}

}  // namespace dsv4::family
