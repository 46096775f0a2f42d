// The cones of bounded decoder replay (see replay.h, docs/replay.md).
#include "family/deepseek_v41/replay.h"

#include <algorithm>

namespace dsv4::family {

ReplayShape replay_shape(const ModelPlan& plan, int64_t ring_capacity, bool drafter) {
  ReplayShape s;
  s.n_layers = plan.n_layers;
  s.window = plan.window;
  s.state_rows = ring_capacity;
  s.tap.assign(plan.n_layers, 0);
  if (drafter && plan.dspark_stages > 0)
    for (int t : plan.dspark_target_layers) s.tap[t] = 1;
  // The last layer every row reaches: the owners of compressed rows or index keys (every later position reads
  // them), Engram and hash-routed layers (their per-row inputs are staged for the whole call).
  int32_t last = -1;
  for (const LayerPlan& l : plan.layers)
    if (l.kv_source || l.owns_index_keys || l.engram || l.hash_routed) last = std::max(last, l.id);
  // Nothing above it: no decoder to bound.
  s.from = last + 1 < plan.n_layers ? std::max(last, 0) : -1;
  return s;
}

std::vector<int64_t> cone_first_rows(const ReplayShape& s, int64_t T, int64_t first_logit) {
  if (!s.bounded()) return {};
  const int64_t state = tap_first_row(s, T);
  std::vector<int64_t> first(static_cast<size_t>(s.n_layers - s.from));
  int64_t out = std::clamp<int64_t>(first_logit, 0, T);  // the last layer: the logit rows
  for (int32_t l = s.n_layers - 1; l >= s.from; --l) {
    first[l - s.from] = out;
    // Layer l's input is read at the rows whose window keys the ring keeps, in the window of every row whose
    // output is computed, and (tap layers) at the drafter's rows.
    int64_t in = state;
    if (out < T) in = std::min(in, std::max<int64_t>(0, out - (s.window - 1)));
    if (s.tap[l]) in = std::min(in, state);
    out = in;  // layer l - 1's output rows
  }
  return first;
}

int64_t tap_first_row(const ReplayShape& s, int64_t T) { return std::max<int64_t>(0, T - s.state_rows); }

}  // namespace dsv4::family
