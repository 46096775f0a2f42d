// with_layers: role lists restricted to the kept backbone layers (rules in with_layers.h).
#include "family/deepseek_v41/with_layers.h"

#include <algorithm>
#include <vector>

#include "family/deepseek_v41/layer_plan.h"
#include "family/deepseek_v41/replay.h"

namespace dsv4::family {
namespace {

std::vector<int32_t> below(const std::vector<int32_t>& ids, int32_t n) {
  std::vector<int32_t> out;
  for (int32_t id : ids)
    if (id < n) out.push_back(id);
  return out;
}

}  // namespace

StatusOr<Config> with_layers(const Config& c, int32_t n) {
  if (n < 1) return error(StatusCode::invalid_argument, "cannot keep {} backbone layers: a model needs at least 1", n);
  if (n >= c.num_hidden_layers) return c;
  const int32_t L = c.num_hidden_layers;
  Config r = c;
  r.num_hidden_layers = n;
  r.compress_ratios.assign(c.compress_ratios.begin(), c.compress_ratios.begin() + n);
  r.compress_ratios.insert(r.compress_ratios.end(), c.compress_ratios.begin() + L, c.compress_ratios.end());
  r.kv_source_layer_ids = below(c.kv_source_layer_ids, n);
  r.index_source_layer_ids = below(c.index_source_layer_ids, n);
  if (c.candidate_source_layer_id >= n) r.candidate_source_layer_id = -1;
  r.engram_layer_ids.clear();
  r.engram_num_embeddings.clear();
  for (size_t i = 0; i < c.engram_layer_ids.size(); ++i) {
    if (c.engram_layer_ids[i] >= n) continue;
    r.engram_layer_ids.push_back(c.engram_layer_ids[i]);
    if (i < c.engram_num_embeddings.size()) r.engram_num_embeddings.push_back(c.engram_num_embeddings[i]);
  }
  r.num_hash_layers = std::min(c.num_hash_layers, n);
  if (below(c.dspark_target_layer_ids, n).size() != c.dspark_target_layer_ids.size()) {
    const int32_t k = std::min(static_cast<int32_t>(c.dspark_target_layer_ids.size()), n);
    r.dspark_target_layer_ids.clear();
    for (int32_t i = n - k; i < n; ++i) r.dspark_target_layer_ids.push_back(i);
  }
  if (Status s = validate_config(r); !s.ok())
    return s.with_context(fmt::format("{} cut to {} layers", variant_name(c.variant), n));
  return r;
}

StatusOr<Config> with_decoder_layers(const Config& c, int32_t n, int32_t m) {
  const int32_t L = c.num_hidden_layers;
  const int32_t b = replay_shape(build_plan(c), c.sliding_window, false).from;
  if (b < 0) return error(StatusCode::invalid_argument, "{} has no decoder layers to keep", variant_name(c.variant));
  if (n < 1 || n > b || m < 1 || b + m > L)
    return error(StatusCode::invalid_argument, "cannot keep layers 0..{} and {} of the decoder (layers {}..{})", n - 1, m,
                 b, L - 1);
  // Layer id in the cut, -1 when dropped.
  auto map = [&](int32_t id) { return id < n ? id : (id >= b && id < b + m ? id - b + n : -1); };
  auto kept = [&](const std::vector<int32_t>& ids) {
    std::vector<int32_t> out;
    for (int32_t id : ids)
      if (map(id) >= 0) out.push_back(map(id));
    return out;
  };
  Config r = c;
  r.num_hidden_layers = n + m;
  r.compress_ratios.assign(c.compress_ratios.begin(), c.compress_ratios.begin() + n);
  r.compress_ratios.insert(r.compress_ratios.end(), c.compress_ratios.begin() + b, c.compress_ratios.begin() + b + m);
  r.compress_ratios.insert(r.compress_ratios.end(), c.compress_ratios.begin() + L, c.compress_ratios.end());
  r.kv_source_layer_ids = kept(c.kv_source_layer_ids);
  r.index_source_layer_ids = kept(c.index_source_layer_ids);
  r.candidate_source_layer_id = c.candidate_source_layer_id >= 0 ? map(c.candidate_source_layer_id) : -1;
  r.engram_layer_ids.clear();
  r.engram_num_embeddings.clear();
  for (size_t i = 0; i < c.engram_layer_ids.size(); ++i) {
    if (map(c.engram_layer_ids[i]) < 0) continue;
    r.engram_layer_ids.push_back(map(c.engram_layer_ids[i]));
    if (i < c.engram_num_embeddings.size()) r.engram_num_embeddings.push_back(c.engram_num_embeddings[i]);
  }
  r.num_hash_layers = std::min(c.num_hash_layers, n);
  const std::vector<int32_t> taps = kept(c.dspark_target_layer_ids);
  if (taps.size() == c.dspark_target_layer_ids.size()) {
    r.dspark_target_layer_ids = taps;
  } else {
    const int32_t k = std::min(static_cast<int32_t>(c.dspark_target_layer_ids.size()), n + m);
    r.dspark_target_layer_ids.clear();
    for (int32_t i = n + m - k; i < n + m; ++i) r.dspark_target_layer_ids.push_back(i);
  }
  if (Status s = validate_config(r); !s.ok())
    return s.with_context(fmt::format("{} cut to {} layers and {} of its decoder", variant_name(c.variant), n, m));
  return r;
}

}  // namespace dsv4::family
