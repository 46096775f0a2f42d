// Binding of the vision tower, aligner and image delimiters to typed views, checked against the release table.
#include "family/deepseek_v41/vision_weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>

namespace dsv4::family {
namespace {

// Looks names up in the stores in order and checks each against the table; every problem is kept.
class VisionBinder {
 public:
  VisionBinder(const TensorTable& table, std::vector<const TensorStore*> stores, std::vector<std::string>& problems)
      : table_(table), stores_(std::move(stores)), problems_(problems) {}

  TensorView get(const std::string& name) {
    const TensorSpec* spec = table_.find(name);
    if (!spec) {  // the table builder and this binder disagree: a programming error, reported as data
      problems_.push_back(fmt::format("{}: not in the release table of this config", name));
      return {};
    }
    for (const TensorStore* s : stores_) {
      if (!s->contains(name)) continue;
      auto v = s->tensor(name);
      if (!v.ok()) {
        problems_.push_back(v.status().message());
        return {};
      }
      if (v->dtype != spec->dtype || v->shape != spec->shape) {
        problems_.push_back(fmt::format("{}: {} {} where the table needs {} {}", name, dtype_name(v->dtype),
                                        shape_string(v->shape), dtype_name(spec->dtype), shape_string(spec->shape)));
        return {};
      }
      return *v;
    }
    problems_.push_back(fmt::format("{}: missing", name));
    return {};
  }
  Matrix matrix(const std::string& group) {
    Matrix m;
    m.weight = get(group + ".weight");
    return m;
  }

 private:
  const TensorTable& table_;
  std::vector<const TensorStore*> stores_;
  std::vector<std::string>& problems_;
};

StatusOr<VisionWeights> bind(const Config& c, std::vector<const TensorStore*> stores) {
  if (c.variant != Variant::v41 || !c.vision)
    return error(StatusCode::invalid_argument, "the model has no vision tower (its config has no vision_config)");
  if (stores.empty() || !stores[0]) return error(StatusCode::invalid_argument, "bind_vision_weights: no tensor store");
  const TensorTable table = expected_tensors(c);
  std::vector<std::string> problems;
  VisionBinder b(table, stores, problems);
  VisionWeights w;
  w.config = *c.vision;
  w.hidden = c.hidden_size;
  w.patch_embed = b.matrix("vision.patch_embed.proj");
  w.patch_embed_bias = b.get("vision.patch_embed.proj.bias");
  for (int32_t i = 0; i < c.vision->num_hidden_layers; ++i) {
    const std::string x = fmt::format("vision.blocks.{}.", i);
    VisionBlockWeights k;
    k.norm1 = b.get(x + "norm1.weight");
    k.norm2 = b.get(x + "norm2.weight");
    k.wqkv = b.matrix(x + "attn.wqkv");
    k.wqkv_bias = b.get(x + "attn.wqkv.bias");
    k.wo = b.matrix(x + "attn.wo");
    k.wo_bias = b.get(x + "attn.wo.bias");
    k.w1 = b.matrix(x + "mlp.w1");
    k.w2 = b.matrix(x + "mlp.w2");
    w.blocks.push_back(std::move(k));
  }
  w.norm = b.get("vision.norm.weight");
  w.aligner_w1 = b.matrix("aligner.w1");
  w.aligner_w1_bias = b.get("aligner.w1.bias");
  w.aligner_w2 = b.matrix("aligner.w2");
  w.aligner_w2_bias = b.get("aligner.w2.bias");
  w.image_start = b.get("image_start");
  w.image_end = b.get("image_end");
  w.image_newline = b.get("image_newline");
  if (!problems.empty()) {
    const size_t shown = std::min<size_t>(problems.size(), 20);
    return error(StatusCode::data_loss, "{}: {} vision tensor(s) cannot be bound:\n  {}{}", stores[0]->path(),
                 problems.size(),
                 fmt::join(std::vector<std::string>(problems.begin(), problems.begin() + shown), "\n  "),
                 shown < problems.size() ? "\n  ..." : "");
  }
  return w;
}

}  // namespace

StatusOr<VisionWeights> bind_vision_weights(const Config& c, const TensorStore& store) { return bind(c, {&store}); }

StatusOr<VisionWeights> bind_vision_weights(const Model& m) {
  std::vector<const TensorStore*> stores{m.store.get()};
  for (const auto& s : m.extra) stores.push_back(s.get());
  return bind(m.config, std::move(stores));
}

}  // namespace dsv4::family
