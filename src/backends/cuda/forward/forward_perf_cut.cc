// Which plan layers `dsv4 bench` builds (see forward_perf_layers.h).
#include <algorithm>
#include <set>

#include "backends/cuda/forward/forward_perf_layers.h"
#include "family/deepseek_v41/layer_roles.h"
#include "family/deepseek_v41/layer_sources.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/replay.h"
#include "family/deepseek_v41/with_layers.h"

namespace dsv4::cuda {
namespace {

// The prefix (and decoder) cut's plan ids, as with_layers / with_decoder_layers keep them.
std::vector<int32_t> prefix_ids(const family::Config& full, const family::ModelPlan& whole, const ForwardBenchOptions& f) {
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < std::min<int32_t>(f.layers, whole.n_layers); ++i) ids.push_back(i);
  if (f.decoder_layers > 0) {
    const int32_t b = family::replay_shape(whole, full.sliding_window, false).from;
    for (int32_t i = b; i < b + f.decoder_layers; ++i) ids.push_back(i);
  }
  return ids;
}

}  // namespace

StatusOr<BenchCut> bench_cut(const ForwardBenchOptions& f) {
  const family::Config full = family::preset_config(family::Preset::full, f.variant);
  const family::ModelPlan whole = family::build_plan(full);
  BenchCut cut;
  cut.by_layer = !f.layer_ids.empty() || f.roles;
  if (!cut.by_layer) {
    if (f.decoder_layers > 0)  // refused by name (a model without a decoder, more layers than it has)
      DSV4_RETURN_IF_ERROR(family::with_decoder_layers(full, f.layers, f.decoder_layers).status());
    cut.plan = bench_config(f.layers, f.variant, f.decoder_layers);
    cut.ids = prefix_ids(full, whole, f);
  } else {
    std::vector<int32_t> want(f.layer_ids.begin(), f.layer_ids.end());
    if (f.roles)
      for (const family::RoleLayer& r : family::plan_roles(whole)) {
        if (r.layer < whole.n_layers) want.push_back(r.layer);
        else cut.notes.push_back(fmt::format("role {} (layer {}) not built: the bench runs no drafter", r.role, r.layer));
      }
    DSV4_ASSIGN_OR_RETURN(cut.ids, family::close_layer_ids(whole, want));
    const std::set<int32_t> asked(want.begin(), want.end());
    for (int32_t id : cut.ids)
      for (const family::LayerSource& s : family::layer_sources(whole, id))
        if (!asked.count(s.layer))
          cut.notes.push_back(fmt::format("layer {} added: layer {} reads its {}", s.layer, id, s.what));
    DSV4_ASSIGN_OR_RETURN(family::Config cfg, family::with_layer_ids(full, cut.ids));
    cut.plan = bench_plan(std::move(cfg));
  }
  for (int32_t id : cut.ids) {
    cut.roles.push_back(family::layer_role(whole.layers[id]));
    if (whole.layers[id].engram)
      cut.notes.push_back(fmt::format("layer {} ({}) built without its Engram (the device synthesizer makes none)", id,
                                      cut.roles.back()));
  }
  return cut;
}

}  // namespace dsv4::cuda
