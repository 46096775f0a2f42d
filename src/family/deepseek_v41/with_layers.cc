// with_layers: role lists restricted to the kept backbone layers and renumbered (rules in with_layers.h).
#include "family/deepseek_v41/with_layers.h"

#include <algorithm>
#include <string>
#include <vector>

#include "family/deepseek_v41/layer_plan.h"
#include "family/deepseek_v41/layer_sources.h"
#include "family/deepseek_v41/replay.h"

namespace dsv4::family {
namespace {

// The cut of `c` to `ids` (checked by the caller: ascending, in range, closed); `what` names it in a refusal.
StatusOr<Config> cut_to(const Config& c, const std::vector<int32_t>& ids, const std::string& what) {
  const int32_t L = c.num_hidden_layers, n = static_cast<int32_t>(ids.size());
  std::vector<int32_t> to(L, -1);  // new id of each backbone layer, -1 when dropped
  for (int32_t i = 0; i < n; ++i) to[ids[i]] = i;
  auto kept = [&](const std::vector<int32_t>& list) {
    std::vector<int32_t> out;
    for (int32_t id : list)
      if (id >= 0 && id < L && to[id] >= 0) out.push_back(to[id]);
    return out;
  };
  Config r = c;
  r.num_hidden_layers = n;
  r.compress_ratios.clear();
  for (int32_t id : ids) r.compress_ratios.push_back(c.compress_ratios[id]);
  r.compress_ratios.insert(r.compress_ratios.end(), c.compress_ratios.begin() + L, c.compress_ratios.end());
  r.kv_source_layer_ids = kept(c.kv_source_layer_ids);
  r.index_source_layer_ids = kept(c.index_source_layer_ids);
  r.candidate_source_layer_id = c.candidate_source_layer_id >= 0 ? to[c.candidate_source_layer_id] : -1;
  r.engram_layer_ids.clear();
  r.engram_num_embeddings.clear();
  for (size_t i = 0; i < c.engram_layer_ids.size(); ++i) {
    if (to[c.engram_layer_ids[i]] < 0) continue;
    r.engram_layer_ids.push_back(to[c.engram_layer_ids[i]]);
    if (i < c.engram_num_embeddings.size()) r.engram_num_embeddings.push_back(c.engram_num_embeddings[i]);
  }
  r.num_hash_layers = static_cast<int32_t>(
      std::count_if(ids.begin(), ids.end(), [&](int32_t id) { return id < c.num_hash_layers; }));
  const std::vector<int32_t> taps = kept(c.dspark_target_layer_ids);
  if (taps.size() == c.dspark_target_layer_ids.size()) {
    r.dspark_target_layer_ids = taps;
  } else {
    const int32_t k = std::min(static_cast<int32_t>(c.dspark_target_layer_ids.size()), n);
    r.dspark_target_layer_ids.clear();
    for (int32_t i = n - k; i < n; ++i) r.dspark_target_layer_ids.push_back(i);
  }
  if (Status s = validate_config(r); !s.ok()) return s.with_context(what);
  return r;
}

}  // namespace

StatusOr<Config> with_layer_ids(const Config& c, const std::vector<int32_t>& ids) {
  const int32_t L = c.num_hidden_layers;
  if (ids.empty()) return error(StatusCode::invalid_argument, "cannot keep no layers: a model needs at least 1");
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= L)
      return error(StatusCode::invalid_argument, "layer {} is not a backbone layer of {} (0..{})", ids[i],
                   variant_name(c.variant), L - 1);
    if (i > 0 && ids[i] <= ids[i - 1])
      return error(StatusCode::invalid_argument, "layer ids must be strictly ascending ({} after {})", ids[i],
                   ids[i - 1]);
  }
  DSV4_RETURN_IF_ERROR(check_layer_ids_closed(build_plan(c), ids));
  return cut_to(c, ids, fmt::format("{} cut to layers {}", variant_name(c.variant), fmt::join(ids, ",")));
}

StatusOr<Config> with_layers(const Config& c, int32_t n) {
  if (n < 1) return error(StatusCode::invalid_argument, "cannot keep {} backbone layers: a model needs at least 1", n);
  if (n >= c.num_hidden_layers) return c;
  std::vector<int32_t> ids(n);
  for (int32_t i = 0; i < n; ++i) ids[i] = i;
  return cut_to(c, ids, fmt::format("{} cut to {} layers", variant_name(c.variant), n));
}

StatusOr<Config> with_decoder_layers(const Config& c, int32_t n, int32_t m) {
  const int32_t L = c.num_hidden_layers;
  const int32_t b = replay_shape(build_plan(c), c.sliding_window, false).from;
  if (b < 0) return error(StatusCode::invalid_argument, "{} has no decoder layers to keep", variant_name(c.variant));
  if (n < 1 || n > b || m < 1 || b + m > L)
    return error(StatusCode::invalid_argument, "cannot keep layers 0..{} and {} of the decoder (layers {}..{})", n - 1, m,
                 b, L - 1);
  // The decoder's first layer owns the last compressed rows and index keys, so the layers after it read theirs
  // from layers at or after it and the set is closed; checked anyway (an Engram layer reads earlier ones).
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < n; ++i) ids.push_back(i);
  for (int32_t i = b; i < b + m; ++i) ids.push_back(i);
  DSV4_RETURN_IF_ERROR(check_layer_ids_closed(build_plan(c), ids));
  return cut_to(c, ids, fmt::format("{} cut to {} layers and {} of its decoder", variant_name(c.variant), n, m));
}

}  // namespace dsv4::family
