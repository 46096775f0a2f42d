// layer_sources: the cross-layer reads of the plan as a list per layer (see layer_sources.h).
#include "family/deepseek_v41/layer_sources.h"

#include <algorithm>
#include <set>

namespace dsv4::family {

std::vector<LayerSource> layer_sources(const ModelPlan& plan, int32_t id) {
  const LayerPlan& p = plan.layers.at(id);
  std::vector<LayerSource> out;
  auto add = [&](int32_t from, std::string_view what) {
    if (from < 0 || from == id) return;
    for (const LayerSource& s : out)
      if (s.layer == from) return;
    out.push_back({from, what});
  };
  add(p.kv_from, "compressed KV rows");
  add(p.topk_from, "top-k");
  add(p.index_keys_from, "index keys");
  add(p.candidate_from, "candidate blocks");
  if (p.engram)
    for (int32_t e : plan.engram_layers)
      if (e < id) add(e, "Engram primes");
  std::sort(out.begin(), out.end(), [](const LayerSource& a, const LayerSource& b) { return a.layer < b.layer; });
  return out;
}

StatusOr<std::vector<int32_t>> close_layer_ids(const ModelPlan& plan, std::vector<int32_t> ids) {
  for (int32_t id : ids)
    if (id < 0 || id >= plan.n_layers)
      return error(StatusCode::invalid_argument, "layer {} is not a backbone layer of {} (0..{})", id,
                   variant_name(plan.variant), plan.n_layers - 1);
  std::set<int32_t> kept(ids.begin(), ids.end());
  // Sources lie below their readers: walking down from the top visits every added source after its reader.
  for (auto it = kept.rbegin(); it != kept.rend(); ++it)
    for (const LayerSource& s : layer_sources(plan, *it)) kept.insert(s.layer);
  return std::vector<int32_t>(kept.begin(), kept.end());
}

Status check_layer_ids_closed(const ModelPlan& plan, const std::vector<int32_t>& ids) {
  const std::set<int32_t> kept(ids.begin(), ids.end());
  for (int32_t id : ids)
    for (const LayerSource& s : layer_sources(plan, id))
      if (!kept.count(s.layer))
        return error(StatusCode::invalid_argument,
                     "layer {} reads its {} from layer {}, which the cut drops (keep layer {} too)", id, s.what,
                     s.layer, s.layer);
  return ok_status();
}

}  // namespace dsv4::family
