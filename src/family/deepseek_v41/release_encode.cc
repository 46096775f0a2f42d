// release_tensor_source: every tensor the oracle reads, as the model stores it, by name.
#include "family/deepseek_v41/release_encode.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <variant>
#include <string>
#include <vector>

#include "family/deepseek_v41/engram_layout.h"
#include "family/deepseek_v41/tensors.h"

namespace dsv4::family {
namespace {

// Tensors the oracle never reads for this config, written with the random profile's values.
bool unread_by_the_oracle(const Model& m, const std::string& name) {
  for (const char* p : {"vision.", "aligner.", "image_"})
    if (name.rfind(p, 0) == 0) return true;
  return m.plan.dspark.empty() && name.rfind("mtp.", 0) == 0;  // no drafter drawn (V4-0731's is not run)
}

}  // namespace

StatusOr<TensorSource> release_tensor_source(const Config& fc, const Model& w, uint64_t seed) {
  const TensorTable table = expected_tensors(fc);
  std::vector<std::string> problems;
  const auto problem = [&](const std::string& name, std::string_view what) {
    problems.push_back(fmt::format("{}: {}", name, what));
  };
  if (w.config.num_hidden_layers != fc.num_hidden_layers)
    return error(StatusCode::invalid_argument, "the weights have {} layers, the config {}", w.config.num_hidden_layers,
                 fc.num_hidden_layers);
  // Linears re-encoded as EXL3 have no release bytes.
  ModelWeights views = w.weights;
  std::set<std::string> exl3;
  for_each_linear(views, w.plan, [&](const std::string& group, LinearRef ref) {
    if (std::visit([](auto* l) { return l->exl3 != nullptr; }, ref)) exl3.insert(group);
  });
  for (const std::string& g : exl3) problem(g + ".weight", "an EXL3 linear (a release checkpoint holds it dense)");
  if (fc.has_engram()) {
    const EngramLayout want = compute_engram_layout(fc);
    for (size_t i = 0; i < want.layers.size(); ++i) {
      const std::string p = fmt::format("layers.{}.engram", fc.engram_layer_ids[i]);
      if (i >= w.engram.layers.size()) {
        problem(p, "missing from the weights");
        continue;
      }
      const EngramLayerLayout& L = w.engram.layers[i];
      if (L.primes != want.layers[i].primes || L.offsets != want.layers[i].offsets)
        problem(p + ".embed.weight", fmt::format("hash primes [{}] / offsets [{}], the config's are [{}] / [{}]",
                                                 fmt::join(L.primes, ", "), fmt::join(L.offsets, ", "),
                                                 fmt::join(want.layers[i].primes, ", "),
                                                 fmt::join(want.layers[i].offsets, ", ")));
      if (L.multipliers != want.layers[i].multipliers)
        problem(p, fmt::format("hash multipliers [{}], but a loaded checkpoint derives [{}] from the layer id "
                               "(model-spec.md §3.4c): no tensor of the release layout holds them",
                               fmt::join(L.multipliers, ", "), fmt::join(want.layers[i].multipliers, ", ")));
    }
  }
  for (const TensorSpec& t : table.tensors) {
    if (!w.store->contains(t.name)) {
      if (unread_by_the_oracle(w, t.name)) continue;
      std::string group = t.name;
      for (const char* x : {".weight", ".scale"})
        if (group.size() > std::strlen(x) && group.compare(group.size() - std::strlen(x), std::strlen(x), x) == 0)
          group.resize(group.size() - std::strlen(x));
      if (!exl3.count(group)) problem(t.name, "no value in the weights");
      continue;
    }
    const auto v = w.store->tensor(t.name);
    const bool scale_alias = t.dtype == DType::f8_e8m0 && v.ok() && v->dtype == DType::u8;
    if (!v.ok() || (v->dtype != t.dtype && !scale_alias) || v->shape != t.shape)
      problem(t.name, v.ok() ? fmt::format("held as {} {}, stored as {} {}", dtype_name(v->dtype),
                                           shape_string(v->shape), dtype_name(t.dtype), shape_string(t.shape))
                             : v.status().message());
  }
  TensorSource src;
  if (fc.has_engram()) {
    EngramTokenMap map;
    map.token_map = w.engram_token_map;
    map.vocab_size = static_cast<int32_t>(fc.vocab_size);
    map.compressed_vocab_size = static_cast<int32_t>(fc.engram_compressed_vocab_size);
    bool in_range = static_cast<int64_t>(map.token_map.size()) == fc.vocab_size;
    for (int32_t t : map.token_map) in_range = in_range && t >= 0 && t < map.compressed_vocab_size;
    if (!in_range) problem("engram_token_map.json", "the weights' token map is not [vocab] ids in [0, compressed)");
    else map.pad_id = map.token_map[static_cast<size_t>(fc.engram_pad_token_id)];
    src.engram_token_map = std::move(map);
  }
  if (!problems.empty())
    return error(StatusCode::invalid_argument, "the weights cannot be written in the release layout exactly ({} "
                 "problems):\n  {}", problems.size(), fmt::join(problems, "\n  "));
  // The model (and with it the store its views point into) stays alive as long as the source.
  std::shared_ptr<const TensorStore> held = w.store;
  TensorSource random = synthetic_tensor_source(fc, seed);
  src.fill = [held, random = std::move(random.fill)](const TensorSpec& t, int64_t off, std::span<uint8_t> out) {
    if (!held->contains(t.name)) return random(t, off, out);
    DSV4_ASSIGN_OR_RETURN(TensorView v, held->tensor(t.name));
    if (off < 0 || off + static_cast<int64_t>(out.size()) > v.nbytes)
      return error(StatusCode::internal, "{}: bytes [{}, {}) of {}", t.name, off, off + out.size(), v.nbytes);
    std::memcpy(out.data(), v.bytes() + off, out.size());
    return ok_status();
  };
  return src;
}

}  // namespace dsv4::family
