// Checkpoint validation against the expected table, and binding of tensors to per-layer views.
#include "family/deepseek_v41/weights.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <type_traits>
#include <variant>

#include "family/deepseek_v41/exl3_layout.h"
#include "formats/exl3/pack.h"

namespace dsv4::family {

Status validate_checkpoint(const Checkpoint& ck, const TensorTable& table) {
  std::vector<FoundTensor> found;
  found.reserve(static_cast<size_t>(ck.tensor_count()));
  for (const auto& file : ck.files()) {
    const std::string fname = std::filesystem::path(file->path()).filename().string();
    for (const auto& e : file->entries()) found.push_back({e.name, e.dtype, e.shape, fname});
  }
  return validate_tensors(table, found).with_context(ck.path());
}

namespace {

using LW = LayerWeights;
using Member = std::variant<TensorView LW::*, Fp8Linear LW::*, Fp4Linear LW::*, Matrix LW::*>;

// Every member of a block and the release name it binds: a tensor's full suffix; an FP8/FP4 linear's or a
// matrix's group (".weight" / ".scale" appended; the mHC mixes and the V4 head mix are groups without a
// suffix). A member binds when the config's table names its tensor; two names for one member (V4.1 and V4
// spellings of the Markov head) bind whichever the table has. Experts are bound apart (ffn.experts.E.*).
struct Field {
  const char* name;
  Member member;
  bool plain = false;  // a matrix stored under the group name itself (no ".weight")
};
const Field kLayerFields[] = {
    {"hc_attn_fn", &LW::hc_attn_fn, true}, {"hc_attn_base", &LW::hc_attn_base},
    {"hc_attn_scale", &LW::hc_attn_scale}, {"hc_ffn_fn", &LW::hc_ffn_fn, true},
    {"hc_ffn_base", &LW::hc_ffn_base}, {"hc_ffn_scale", &LW::hc_ffn_scale},
    {"attn_norm.weight", &LW::attn_norm}, {"ffn_norm.weight", &LW::ffn_norm},
    {"attn.attn_sink", &LW::attn_sink}, {"attn.q_norm.weight", &LW::q_norm},
    {"attn.kv_norm.weight", &LW::kv_norm}, {"attn.wq_a", &LW::wq_a}, {"attn.wq_b", &LW::wq_b},
    {"attn.wkv", &LW::wkv}, {"attn.wo_a", &LW::wo_a}, {"attn.wo_b", &LW::wo_b},
    {"attn.compressor.wkv", &LW::compressor_wkv}, {"attn.compressor.wgate", &LW::compressor_wgate},
    {"attn.compressor.norm.weight", &LW::compressor_norm}, {"attn.compressor.ape", &LW::compressor_ape},
    {"attn.indexer.wq_b", &LW::indexer_wq_b}, {"attn.indexer.weights_proj", &LW::indexer_weights_proj},
    {"attn.indexer.wk", &LW::indexer_wk}, {"attn.indexer.k_norm.weight", &LW::indexer_k_norm},
    {"attn.indexer.compressor.wkv", &LW::indexer_compressor_wkv},
    {"attn.indexer.compressor.wgate", &LW::indexer_compressor_wgate},
    {"attn.indexer.compressor.norm.weight", &LW::indexer_compressor_norm},
    {"attn.indexer.compressor.ape", &LW::indexer_compressor_ape},
    {"ffn.gate", &LW::gate_weight}, {"ffn.gate.bias", &LW::gate_bias}, {"ffn.gate.bias_vl", &LW::gate_bias_vl},
    {"ffn.gate.tid2eid", &LW::tid2eid}, {"ffn.shared_experts.w1", &LW::shared_w1},
    {"ffn.shared_experts.w2", &LW::shared_w2}, {"ffn.shared_experts.w3", &LW::shared_w3},
    {"engram.embed.weight", &LW::engram_table}, {"engram.embed.scale", &LW::engram_table_scale},
    {"engram.q_weight", &LW::engram_q_weight}, {"engram.k_weight", &LW::engram_k_weight},
    {"engram.wkv", &LW::engram_wkv}, {"main_proj", &LW::main_proj}, {"main_norm.weight", &LW::main_norm},
    {"norm.weight", &LW::final_norm}, {"markov_head.embed.weight", &LW::markov_embed},
    {"markov_head.markov_w1.weight", &LW::markov_embed}, {"markov_head.head", &LW::markov_head},
    {"markov_head.markov_w2", &LW::markov_head}, {"confidence_head.proj", &LW::confidence_proj},
    {"hc_head_fn", &LW::hc_head_fn, true}, {"hc_head_base", &LW::hc_head_base},
    {"hc_head_scale", &LW::hc_head_scale},
};

// The tensor of the release table standing for a field: the tensor itself, or a linear's weight.
std::string table_name(const std::string& full, const Member& m, bool plain) {
  if (std::holds_alternative<TensorView LW::*>(m) || plain) return full;
  return full + ".weight";
}

// Looks tensors up in the sources; every failure is kept.
class Binder {
 public:
  Binder(const Config& c, const TensorTable& table, const BindSources& src, std::vector<std::string>& problems)
      : c_(c), table_(table), src_(src), problems_(problems) {}

  // Whether the table names the tensor standing for `full` (a linear group or a tensor).
  bool expected(const std::string& full, const Member& m, bool plain) const {
    return table_.find(table_name(full, m, plain)) != nullptr;
  }
  TensorView get(const std::string& full) {
    for (const TensorStore* s : stores())
      if (s->contains(full)) {
        auto v = s->tensor(full);
        if (v.ok()) return *v;
        problems_.push_back(v.status().message());
        return {};
      }
    problems_.push_back(fmt::format("{}: missing", full));
    return {};
  }
  TensorView maybe(const std::string& full) {
    for (const TensorStore* s : stores())
      if (s->contains(full)) return get(full);
    return {};
  }
  Fp8Linear fp8(const std::string& group) {
    Fp8Linear w;
    w.block = c_.quant.weight_block_in;
    if ((w.exl3 = exl3(group))) return w;
    w.weight = get(group + ".weight");
    w.scale = get(group + ".scale");
    return w;
  }
  Fp4Linear fp4(const std::string& group) {
    Fp4Linear w;
    if ((w.exl3 = exl3(group))) return w;
    w.weight = get(group + ".weight");
    w.scale = get(group + ".scale");
    return w;
  }
  Matrix matrix(const std::string& group, bool plain) {
    Matrix m;
    if (!plain && (m.exl3 = exl3(group))) return m;
    m.weight = get(plain ? group : group + ".weight");
    return m;
  }
  void bind(LW& w, const std::string& prefix, const Field& f) {
    const std::string full = prefix + f.name;
    if (!expected(full, f.member, f.plain)) return;
    std::visit([&](auto mp) {
      using T = std::remove_cvref_t<decltype(w.*mp)>;
      if constexpr (std::is_same_v<T, TensorView>) {
        // EXL3 packs leave the image-token router bias out (formats.md §1.12): image rows then route as text.
        w.*mp = src_.pack_plan && std::string_view(f.name) == "ffn.gate.bias_vl" ? maybe(full) : get(full);
      } else if constexpr (std::is_same_v<T, Fp8Linear>) {
        w.*mp = fp8(full);
      } else if constexpr (std::is_same_v<T, Fp4Linear>) {
        w.*mp = fp4(full);
      } else {
        w.*mp = matrix(full, f.plain);
      }
    }, f.member);
  }

 private:
  std::vector<const TensorStore*> stores() const {
    std::vector<const TensorStore*> s{src_.store};
    s.insert(s.end(), src_.extra.begin(), src_.extra.end());
    return s;
  }
  // The EXL3 linear standing for release group `full` in a pack, or null.
  Exl3Ref exl3(const std::string& full) {
    if (!src_.pack_plan) return nullptr;
    const std::vector<const Exl3Group*> groups = src_.pack_plan->groups_of(full);
    if (groups.empty()) return nullptr;
    auto w = std::make_shared<Exl3Linear>();
    for (const Exl3Group* g : groups) {
      auto L = exl3::load_linear(*src_.store, g->prefix);
      if (!L.ok()) {
        problems_.push_back(L.status().message());
        return nullptr;
      }
      if (L->in_features != g->in_padded || L->out_features != g->out_padded) {
        problems_.push_back(fmt::format("EXL3 linear '{}' is [{}, {}], the layout needs [{}, {}]", g->prefix,
                                        L->in_features, L->out_features, g->in_padded, g->out_padded));
        return nullptr;
      }
      add_exl3_part(*w, g->in, g->out, std::move(*L));
    }
    return w;
  }

  const Config& c_;
  const TensorTable& table_;
  const BindSources& src_;
  std::vector<std::string>& problems_;
};

LayerWeights bind_layer(const LayerPlan& p, Binder& b) {
  const std::string prefix = p.name() + ".";
  LayerWeights w;
  for (const Field& f : kLayerFields) b.bind(w, prefix, f);
  if (!present(w.gate_bias_vl) && present(w.gate_bias) && !present(w.tid2eid) &&
      b.expected(prefix + "ffn.gate.bias_vl", &LW::gate_bias_vl, false))
    w.gate_bias_vl = w.gate_bias;  // a pack's absent image-token bias
  w.experts.resize(static_cast<size_t>(p.n_routed_experts));
  for (int32_t e = 0; e < p.n_routed_experts; ++e) {
    const std::string x = fmt::format("{}ffn.experts.{}.", prefix, e);
    w.experts[e] = {b.fp4(x + "w1"), b.fp4(x + "w2"), b.fp4(x + "w3")};
  }
  return w;
}

// Visits every linear member of a block that the block holds.
template <typename F>
void block_linears(LayerWeights& w, const std::string& prefix, F&& f) {
  for (const Field& fd : kLayerFields)
    std::visit([&](auto mp) {
      using T = std::remove_cvref_t<decltype(w.*mp)>;
      if constexpr (!std::is_same_v<T, TensorView>)
        if ((w.*mp).held() && !fd.plain) f(prefix + fd.name, LinearRef{&(w.*mp)});
    }, fd.member);
  for (size_t e = 0; e < w.experts.size(); ++e) {
    const std::string x = fmt::format("{}ffn.experts.{}.", prefix, e);
    if (w.experts[e].w1.held()) f(x + "w1", LinearRef{&w.experts[e].w1});
    if (w.experts[e].w2.held()) f(x + "w2", LinearRef{&w.experts[e].w2});
    if (w.experts[e].w3.held()) f(x + "w3", LinearRef{&w.experts[e].w3});
  }
}

// Visits every stored tensor a block's views hold, by full name.
template <typename F>
void block_tensors(const LayerWeights& w, const std::string& prefix, F&& f) {
  for (const Field& fd : kLayerFields)
    std::visit([&](auto mp) {
      using T = std::remove_cvref_t<decltype(w.*mp)>;
      const std::string n = prefix + fd.name;
      if constexpr (std::is_same_v<T, TensorView>) {
        if (present(w.*mp)) f(n, w.*mp);
      } else if constexpr (std::is_same_v<T, Matrix>) {
        if (present((w.*mp).weight)) f(fd.plain ? n : n + ".weight", (w.*mp).weight);
      } else {
        if (present((w.*mp).weight)) f(n + ".weight", (w.*mp).weight), f(n + ".scale", (w.*mp).scale);
      }
    }, fd.member);
  for (size_t e = 0; e < w.experts.size(); ++e)
    for (const auto& [s, l] : {std::pair{"w1", &w.experts[e].w1}, std::pair{"w2", &w.experts[e].w2},
                               std::pair{"w3", &w.experts[e].w3}})
      if (present(l->weight)) {
        const std::string x = fmt::format("{}ffn.experts.{}.{}", prefix, e, s);
        f(x + ".weight", l->weight), f(x + ".scale", l->scale);
      }
}

}  // namespace

void for_each_tensor(const ModelWeights& w, const ModelPlan& plan,
                     const std::function<void(const std::string& name, const TensorView& view)>& f) {
  for (const auto& [n, v] : {std::pair{"embed.weight", &w.embed}, std::pair{"head.weight", &w.head.weight},
                             std::pair{"norm.weight", &w.norm}, std::pair{"hc_head_fn", &w.hc_head_fn.weight},
                             std::pair{"hc_head_base", &w.hc_head_base}, std::pair{"hc_head_scale", &w.hc_head_scale},
                             std::pair{"image_start", &w.image_start}, std::pair{"image_end", &w.image_end},
                             std::pair{"image_newline", &w.image_newline}})
    if (present(*v)) f(n, *v);
  for (size_t l = 0; l < w.layers.size(); ++l) block_tensors(w.layers[l], plan.layers[l].name() + ".", f);
  for (size_t s = 0; s < w.dspark.size(); ++s) block_tensors(w.dspark[s], plan.dspark[s].name() + ".", f);
}

void for_each_linear(ModelWeights& w, const ModelPlan& plan,
                     const std::function<void(const std::string& group, LinearRef linear)>& f) {
  for (size_t l = 0; l < w.layers.size(); ++l) block_linears(w.layers[l], plan.layers[l].name() + ".", f);
  if (w.head.held()) f("head", LinearRef{&w.head});
  for (size_t s = 0; s < w.dspark.size(); ++s) block_linears(w.dspark[s], plan.dspark[s].name() + ".", f);
}

void add_exl3_part(Exl3Linear& w, int64_t in, int64_t out, exl3::Linear L) {
  Exl3Part P;
  P.in = in;
  P.out = out;
  P.in_padded = L.in_features;
  P.out_padded = L.out_features;
  P.packed = std::move(L);
  w.in += in;
  w.out += out;
  w.parts.push_back(std::move(P));
}

StatusOr<ModelWeights> bind_weights(const Config& c, const ModelPlan& plan, const BindSources& src) {
  if (!src.store) return error(StatusCode::invalid_argument, "bind_weights: no tensor store");
  const TensorTable table = expected_tensors(c);
  std::vector<std::string> problems;
  Binder b(c, table, src, problems);
  ModelWeights m;
  m.embed = b.get("embed.weight");
  m.head = b.matrix("head", false);
  m.norm = b.get("norm.weight");
  if (c.variant == Variant::v4) {
    m.hc_head_fn = b.matrix("hc_head_fn", true);
    m.hc_head_base = b.get("hc_head_base");
    m.hc_head_scale = b.get("hc_head_scale");
  } else if (c.vision) {
    m.image_start = b.maybe("image_start");
    m.image_end = b.maybe("image_end");
    m.image_newline = b.maybe("image_newline");
  }
  for (const LayerPlan& p : plan.layers) m.layers.push_back(bind_layer(p, b));
  for (const LayerPlan& p : plan.dspark) m.dspark.push_back(bind_layer(p, b));
  if (!problems.empty()) {
    const size_t shown = std::min<size_t>(problems.size(), 20);
    return error(StatusCode::data_loss, "{}: {} tensor(s) cannot be bound:\n  {}{}", src.store->path(), problems.size(),
                 fmt::join(std::vector<std::string>(problems.begin(), problems.begin() + shown), "\n  "),
                 shown < problems.size() ? "\n  ..." : "");
  }
  return m;
}

StatusOr<ModelWeights> bind_weights(const Config& c, const ModelPlan& plan, const TensorStore& store) {
  BindSources src;
  src.store = &store;
  return bind_weights(c, plan, src);
}

}  // namespace dsv4::family
