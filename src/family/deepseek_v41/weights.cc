// Checkpoint validation against the expected table, and binding of tensors to per-layer views.
#include "family/deepseek_v41/weights.h"

#include <filesystem>

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

// Looks tensors up by name under a prefix; the first failure is kept.
class Binder {
 public:
  Binder(const Checkpoint& ck, std::string prefix) : ck_(ck), prefix_(std::move(prefix)) {}
  TensorView get(const std::string& name) {
    auto v = ck_.tensor(prefix_ + name);
    if (!v.ok()) {
      if (status_.ok()) status_ = v.status();
      return {};
    }
    return *v;
  }
  TensorView maybe(const std::string& name) {
    return ck_.contains(prefix_ + name) ? get(name) : TensorView{};
  }
  Fp8Linear fp8(const std::string& name) { return {get(name + ".weight"), get(name + ".scale")}; }
  Fp4Linear fp4(const std::string& name) { return {get(name + ".weight"), get(name + ".scale")}; }
  const Status& status() const { return status_; }

 private:
  const Checkpoint& ck_;
  std::string prefix_;
  Status status_;
};

LayerWeights bind_layer(const Config& c, const LayerPlan& p, const Checkpoint& ck, Status& st) {
  Binder b(ck, p.name() + ".");
  LayerWeights w;
  w.hc_attn_fn = b.get("hc_attn_fn");
  w.hc_attn_base = b.get("hc_attn_base");
  w.hc_attn_scale = b.get("hc_attn_scale");
  w.hc_ffn_fn = b.get("hc_ffn_fn");
  w.hc_ffn_base = b.get("hc_ffn_base");
  w.hc_ffn_scale = b.get("hc_ffn_scale");
  w.attn_norm = b.get("attn_norm.weight");
  w.ffn_norm = b.get("ffn_norm.weight");
  w.attn_sink = b.get("attn.attn_sink");
  w.q_norm = b.get("attn.q_norm.weight");
  w.kv_norm = b.get("attn.kv_norm.weight");
  w.wq_a = b.fp8("attn.wq_a");
  w.wq_b = b.fp8("attn.wq_b");
  w.wkv = b.fp8("attn.wkv");
  w.wo_a = b.fp8("attn.wo_a");
  w.wo_b = b.fp8("attn.wo_b");
  if (p.kv_source) {
    w.compressor_wkv = b.get("attn.compressor.wkv.weight");
    w.compressor_norm = b.get("attn.compressor.norm.weight");
    if (p.compressor_gate) w.compressor_wgate = b.get("attn.compressor.wgate.weight");
    if (c.variant == Variant::v4) w.compressor_ape = b.get("attn.compressor.ape");
  }
  if (p.index_source) {
    w.indexer_wq_b = b.fp8("attn.indexer.wq_b");
    w.indexer_weights_proj = b.get("attn.indexer.weights_proj.weight");
  }
  if (p.owns_index_keys) {
    if (c.variant == Variant::v41) {
      w.indexer_wk = b.get("attn.indexer.wk.weight");
      w.indexer_k_norm = b.get("attn.indexer.k_norm.weight");
    } else {
      w.indexer_compressor_wkv = b.get("attn.indexer.compressor.wkv.weight");
      w.indexer_compressor_wgate = b.get("attn.indexer.compressor.wgate.weight");
      w.indexer_compressor_norm = b.get("attn.indexer.compressor.norm.weight");
      w.indexer_compressor_ape = b.get("attn.indexer.compressor.ape");
    }
  }
  w.gate_weight = b.get("ffn.gate.weight");
  if (p.hash_routed) {
    w.tid2eid = b.get("ffn.gate.tid2eid");
  } else {
    w.gate_bias = b.get("ffn.gate.bias");
    if (c.variant == Variant::v41) w.gate_bias_vl = b.get("ffn.gate.bias_vl");
  }
  w.experts.resize(static_cast<size_t>(p.n_routed_experts));
  for (int32_t e = 0; e < p.n_routed_experts; ++e) {
    const std::string x = fmt::format("ffn.experts.{}.", e);
    w.experts[e] = {b.fp4(x + "w1"), b.fp4(x + "w2"), b.fp4(x + "w3")};
  }
  w.shared_w1 = b.fp8("ffn.shared_experts.w1");
  w.shared_w2 = b.fp8("ffn.shared_experts.w2");
  w.shared_w3 = b.fp8("ffn.shared_experts.w3");
  if (p.engram) {
    w.engram_table = b.get("engram.embed.weight");
    w.engram_table_scale = b.get("engram.embed.scale");
    w.engram_q_weight = b.get("engram.q_weight");
    w.engram_k_weight = b.get("engram.k_weight");
    w.engram_wkv = b.fp8("engram.wkv");
  }
  if (p.is_dspark && p.dspark_stage == 0) {
    w.main_proj = b.fp8("main_proj");
    w.main_norm = b.get("main_norm.weight");
  }
  if (p.is_dspark && p.dspark_stage == c.num_dspark_stages() - 1) {
    const bool v41 = c.variant == Variant::v41;
    w.final_norm = b.get("norm.weight");
    w.markov_embed = b.get(v41 ? "markov_head.embed.weight" : "markov_head.markov_w1.weight");
    w.markov_head = b.get(v41 ? "markov_head.head.weight" : "markov_head.markov_w2.weight");
    w.confidence_proj = b.get("confidence_head.proj.weight");
    if (!v41) {
      w.hc_head_fn = b.get("hc_head_fn");
      w.hc_head_base = b.get("hc_head_base");
      w.hc_head_scale = b.get("hc_head_scale");
    }
  }
  if (st.ok()) st = b.status();
  return w;
}

}  // namespace

StatusOr<ModelWeights> bind_weights(const Config& c, const ModelPlan& plan, const Checkpoint& ck) {
  ModelWeights m;
  Binder b(ck, "");
  m.embed = b.get("embed.weight");
  m.head = b.get("head.weight");
  m.norm = b.get("norm.weight");
  if (c.variant == Variant::v4) {
    m.hc_head_fn = b.get("hc_head_fn");
    m.hc_head_base = b.get("hc_head_base");
    m.hc_head_scale = b.get("hc_head_scale");
  } else if (c.vision) {
    m.image_start = b.get("image_start");
    m.image_end = b.get("image_end");
    m.image_newline = b.get("image_newline");
  }
  Status st = b.status();
  for (const LayerPlan& p : plan.layers) m.layers.push_back(bind_layer(c, p, ck, st));
  for (const LayerPlan& p : plan.dspark) m.dspark.push_back(bind_layer(c, p, ck, st));
  if (!st.ok()) return st;
  return m;
}

StatusOr<Model> open_model(const std::string& dir) {
  Model m;
  m.path = dir;
  DSV4_ASSIGN_OR_RETURN(m.config, load_config(dir));
  m.plan = build_plan(m.config);
  m.table = expected_tensors(m.config);
  DSV4_ASSIGN_OR_RETURN(m.checkpoint, Checkpoint::open(dir));
  DSV4_RETURN_IF_ERROR(validate_checkpoint(m.checkpoint, m.table));
  DSV4_ASSIGN_OR_RETURN(m.weights, bind_weights(m.config, m.plan, m.checkpoint));
  return m;
}

}  // namespace dsv4::family
