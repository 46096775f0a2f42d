// expected_tensors: the checkpoint's tensor table derived from the config (model-spec.md §5.2-§5.5, §8).
#include "family/deepseek_v41/tensors.h"

#include <fmt/ranges.h>

#include <algorithm>

#include "family/deepseek_v41/engram_layout.h"
#include "family/deepseek_v41/layer_plan.h"

namespace dsv4::family {

std::string_view tensor_role_name(TensorRole r) {
  switch (r) {
    case TensorRole::fp8_weight: return "fp8_weight";
    case TensorRole::fp8_scale: return "fp8_scale";
    case TensorRole::fp4_weight: return "fp4_weight";
    case TensorRole::fp4_scale: return "fp4_scale";
    case TensorRole::engram_table: return "engram_table";
    case TensorRole::engram_scale: return "engram_scale";
    case TensorRole::norm: return "norm";
    case TensorRole::linear: return "linear";
    case TensorRole::embedding: return "embedding";
    case TensorRole::bias: return "bias";
    case TensorRole::attn_sink: return "attn_sink";
    case TensorRole::hc_fn: return "hc_fn";
    case TensorRole::hc_base: return "hc_base";
    case TensorRole::hc_scale: return "hc_scale";
    case TensorRole::ape: return "ape";
    case TensorRole::engram_gate: return "engram_gate";
    case TensorRole::tid2eid: return "tid2eid";
  }
  return "?";
}

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorTable::shard_file(int32_t shard) const {
  return fmt::format("model-{:05d}-of-{:05d}.safetensors", shard, num_shards);
}

int64_t TensorTable::total_bytes() const {
  int64_t s = 0;
  for (const auto& t : tensors) s += t.bytes();
  return s;
}

std::map<DType, int64_t> TensorTable::bytes_by_dtype() const {
  std::map<DType, int64_t> m;
  for (const auto& t : tensors) m[t.dtype] += t.bytes();
  return m;
}

const TensorSpec* TensorTable::find(std::string_view name) const {
  auto it = by_name.find(std::string(name));
  return it == by_name.end() ? nullptr : &tensors[it->second];
}

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Appends tensors to one shard; names get `prefix`.
class Builder {
 public:
  Builder(const Config& c, std::vector<TensorSpec>& out) : c_(c), out_(out) {}
  void at(int32_t shard, std::string prefix) {
    shard_ = shard;
    prefix_ = std::move(prefix);
  }
  void add(const std::string& name, DType dt, std::vector<int64_t> shape, TensorRole role) {
    out_.push_back({prefix_ + name, dt, std::move(shape), shard_, role});
  }
  void fp8(const std::string& name, int64_t out, int64_t in) {
    const int64_t bo = c_.quant.weight_block_out, bi = c_.quant.weight_block_in;
    add(name + ".weight", DType::f8_e4m3, {out, in}, TensorRole::fp8_weight);
    add(name + ".scale", DType::f8_e8m0, {ceil_div(out, bo), ceil_div(in, bi)}, TensorRole::fp8_scale);
  }
  void fp4(const std::string& name, int64_t out, int64_t in) {
    add(name + ".weight", DType::i8, {out, in / 2}, TensorRole::fp4_weight);
    add(name + ".scale", DType::f8_e8m0, {out, in / 32}, TensorRole::fp4_scale);
  }
  void bf16(const std::string& name, std::vector<int64_t> shape, TensorRole role) {
    add(name, DType::bf16, std::move(shape), role);
  }
  void f32(const std::string& name, std::vector<int64_t> shape, TensorRole role) {
    add(name, DType::f32, std::move(shape), role);
  }

 private:
  const Config& c_;
  std::vector<TensorSpec>& out_;
  int32_t shard_ = 0;
  std::string prefix_;
};

// The set every block has (model-spec.md §5.3 without Engram; §8 "common").
void common_block(const Config& c, const LayerPlan& p, Builder& b) {
  const int64_t D = c.hidden_size, H = c.num_attention_heads, d = c.head_dim, Q = c.q_lora_rank;
  const int64_t G = c.o_groups, O = c.o_lora_rank, I = c.moe_intermediate_size;
  const int64_t E = p.n_routed_experts, hc = c.hc_mult, mix = (2 + hc) * hc;
  b.f32("attn.attn_sink", {H}, TensorRole::attn_sink);
  b.bf16("attn.kv_norm.weight", {d}, TensorRole::norm);
  b.bf16("attn.q_norm.weight", {Q}, TensorRole::norm);
  b.fp8("attn.wkv", d, D);
  b.fp8("attn.wo_a", G * O, H * d / G);
  b.fp8("attn.wo_b", D, G * O);
  b.fp8("attn.wq_a", Q, D);
  b.fp8("attn.wq_b", H * d, Q);
  b.bf16("attn_norm.weight", {D}, TensorRole::norm);
  for (int64_t e = 0; e < E; ++e) {
    const std::string x = fmt::format("ffn.experts.{}.", e);
    b.fp4(x + "w1", I, D);
    b.fp4(x + "w2", D, I);
    b.fp4(x + "w3", I, D);
  }
  if (p.hash_routed) {
    b.add("ffn.gate.tid2eid", DType::i64, {c.vocab_size, p.num_experts_per_tok}, TensorRole::tid2eid);
  } else {
    b.f32("ffn.gate.bias", {E}, TensorRole::bias);
    if (c.variant == Variant::v41) b.f32("ffn.gate.bias_vl", {E}, TensorRole::bias);
  }
  b.bf16("ffn.gate.weight", {E, D}, TensorRole::linear);
  b.fp8("ffn.shared_experts.w1", I, D);
  b.fp8("ffn.shared_experts.w2", D, I);
  b.fp8("ffn.shared_experts.w3", I, D);
  b.bf16("ffn_norm.weight", {D}, TensorRole::norm);
  for (const char* s : {"attn", "ffn"}) {
    b.f32(fmt::format("hc_{}_base", s), {mix}, TensorRole::hc_base);
    b.f32(fmt::format("hc_{}_fn", s), {mix, hc * D}, TensorRole::hc_fn);
    b.f32(fmt::format("hc_{}_scale", s), {3}, TensorRole::hc_scale);
  }
}

// Compressor and indexer tensors of a backbone layer.
void csa_tensors(const Config& c, const LayerPlan& p, Builder& b) {
  const int64_t D = c.hidden_size, d = c.head_dim, Q = c.q_lora_rank;
  const int64_t ih = c.index_n_heads, ihd = c.index_head_dim;
  if (c.variant == Variant::v41) {
    if (p.kv_source) {
      b.bf16("attn.compressor.norm.weight", {d}, TensorRole::norm);
      if (p.compressor_gate) b.bf16("attn.compressor.wgate.weight", {d, D}, TensorRole::linear);
      b.bf16("attn.compressor.wkv.weight", {d, D}, TensorRole::linear);
    }
    if (p.owns_index_keys) {
      b.bf16("attn.indexer.k_norm.weight", {ihd}, TensorRole::norm);
      b.bf16("attn.indexer.wk.weight", {ihd, d}, TensorRole::linear);
    }
    if (p.index_source) {
      b.bf16("attn.indexer.weights_proj.weight", {ih, D}, TensorRole::linear);
      b.fp8("attn.indexer.wq_b", ih * ihd, Q);
    }
    return;
  }
  if (!p.kv_source) return;
  const int64_t r = p.compress_ratio, w = p.compressor_overlap ? 2 * d : d;
  b.f32("attn.compressor.ape", {r, w}, TensorRole::ape);
  b.bf16("attn.compressor.norm.weight", {d}, TensorRole::norm);
  b.bf16("attn.compressor.wgate.weight", {w, D}, TensorRole::linear);
  b.bf16("attn.compressor.wkv.weight", {w, D}, TensorRole::linear);
  if (p.index_source) {
    b.f32("attn.indexer.compressor.ape", {r, 2 * ihd}, TensorRole::ape);
    b.bf16("attn.indexer.compressor.norm.weight", {ihd}, TensorRole::norm);
    b.bf16("attn.indexer.compressor.wgate.weight", {2 * ihd, D}, TensorRole::linear);
    b.bf16("attn.indexer.compressor.wkv.weight", {2 * ihd, D}, TensorRole::linear);
    b.bf16("attn.indexer.weights_proj.weight", {ih, D}, TensorRole::linear);
    b.fp8("attn.indexer.wq_b", ih * ihd, Q);
  }
}

void engram_tensors(const Config& c, int64_t rows, Builder& b) {
  const int64_t D = c.hidden_size, hc = c.hc_mult, hd = c.engram_head_dim;
  b.add("engram.embed.scale", DType::f8_e8m0, {rows, hd / 32}, TensorRole::engram_scale);
  b.add("engram.embed.weight", DType::f8_e4m3, {rows, hd}, TensorRole::engram_table);
  b.bf16("engram.k_weight", {hc, D}, TensorRole::engram_gate);
  b.bf16("engram.q_weight", {hc, D}, TensorRole::engram_gate);
  b.fp8("engram.wkv", (hc + 1) * D, int64_t{c.engram_num_orders()} * c.engram_n_heads * hd);
}

void hc_head(const Config& c, Builder& b) {
  const int64_t hc = c.hc_mult;
  b.f32("hc_head_base", {hc}, TensorRole::hc_base);
  b.f32("hc_head_fn", {hc, hc * c.hidden_size}, TensorRole::hc_fn);
  b.f32("hc_head_scale", {1}, TensorRole::hc_scale);
}

// Stage-specific DSpark tensors: main_proj on the first stage, the heads on the last.
void dspark_extras(const Config& c, const LayerPlan& p, Builder& b) {
  const int64_t D = c.hidden_size, V = c.vocab_size, R = c.dspark_markov_rank;
  const bool v41 = c.variant == Variant::v41;
  if (p.dspark_stage == 0) {
    b.bf16("main_norm.weight", {D}, TensorRole::norm);
    b.fp8("main_proj", D, c.dspark_main_dim());
  }
  if (p.dspark_stage == c.num_dspark_stages() - 1) {
    b.bf16("confidence_head.proj.weight", {1, D + R}, TensorRole::linear);
    b.bf16(v41 ? "markov_head.embed.weight" : "markov_head.markov_w1.weight", {V, R}, TensorRole::embedding);
    b.bf16(v41 ? "markov_head.head.weight" : "markov_head.markov_w2.weight", {V, R}, TensorRole::linear);
    b.bf16("norm.weight", {D}, TensorRole::norm);
    if (!v41) hc_head(c, b);
  }
}

void vision_tensors(const Config& c, Builder& b) {
  const VisionConfig& v = *c.vision;
  const int64_t vh = v.hidden_size, D = c.hidden_size, ds = v.downsample_ratio;
  b.bf16("aligner.w1.bias", {D}, TensorRole::bias);
  b.bf16("aligner.w1.weight", {D, vh * ds * ds}, TensorRole::linear);
  b.bf16("aligner.w2.bias", {D}, TensorRole::bias);
  b.bf16("aligner.w2.weight", {D, D}, TensorRole::linear);
  for (int32_t i = 0; i < v.num_hidden_layers; ++i) {
    const std::string x = fmt::format("vision.blocks.{}.", i);
    b.bf16(x + "attn.wo.bias", {vh}, TensorRole::bias);
    b.bf16(x + "attn.wo.weight", {vh, vh}, TensorRole::linear);
    b.bf16(x + "attn.wqkv.bias", {3 * vh}, TensorRole::bias);
    b.bf16(x + "attn.wqkv.weight", {3 * vh, vh}, TensorRole::linear);
    b.bf16(x + "mlp.w1.weight", {2 * int64_t{v.intermediate_size}, vh}, TensorRole::linear);
    b.bf16(x + "mlp.w2.weight", {vh, v.intermediate_size}, TensorRole::linear);
    b.bf16(x + "norm1.weight", {vh}, TensorRole::norm);
    b.bf16(x + "norm2.weight", {vh}, TensorRole::norm);
  }
  b.bf16("vision.norm.weight", {vh}, TensorRole::norm);
  b.bf16("vision.patch_embed.proj.bias", {vh}, TensorRole::bias);
  b.bf16("vision.patch_embed.proj.weight", {vh, 3 * int64_t{v.patch_size} * v.patch_size}, TensorRole::linear);
}

}  // namespace

TensorTable expected_tensors(const Config& c) {
  const ModelPlan plan = build_plan(c);
  const bool v41 = c.variant == Variant::v41;
  const int64_t D = c.hidden_size, V = c.vocab_size;
  TensorTable t;
  Builder b(c, t.tensors);
  int32_t shard = 0;
  // Shard order (model-spec.md §5.5, §8): [vision], embed, layers, head, mtp stages, [Engram tables].
  if (v41 && c.vision) {
    b.at(++shard, "");
    vision_tensors(c, b);
  }
  b.at(++shard, "");
  b.bf16("embed.weight", {V, D}, TensorRole::embedding);
  if (v41 && c.vision)
    for (const char* n : {"image_end", "image_newline", "image_start"}) b.bf16(n, {D}, TensorRole::embedding);
  for (const LayerPlan& p : plan.layers) {
    b.at(++shard, p.name() + ".");
    common_block(c, p, b);
    csa_tensors(c, p, b);
  }
  b.at(++shard, "");
  b.bf16("head.weight", {V, D}, TensorRole::linear);
  b.bf16("norm.weight", {D}, TensorRole::norm);
  if (!v41) hc_head(c, b);
  for (const LayerPlan& p : plan.dspark) {
    b.at(++shard, p.name() + ".");
    common_block(c, p, b);
    dspark_extras(c, p, b);
  }
  if (c.has_engram()) {
    for (size_t i = 0; i < c.engram_layer_ids.size(); ++i) {
      b.at(++shard, fmt::format("layers.{}.", c.engram_layer_ids[i]));
      engram_tensors(c, c.engram_num_embeddings[i], b);
    }
  }
  t.num_shards = shard;
  std::stable_sort(t.tensors.begin(), t.tensors.end(), [](const TensorSpec& a, const TensorSpec& b) {
    return a.shard != b.shard ? a.shard < b.shard : a.name < b.name;
  });
  t.by_name.reserve(t.tensors.size());
  for (size_t i = 0; i < t.tensors.size(); ++i) t.by_name.emplace(t.tensors[i].name, i);
  return t;
}

Status validate_tensors(const TensorTable& expected, const std::vector<FoundTensor>& found) {
  std::vector<std::string> missing, extra, wrong;
  std::unordered_map<std::string, const FoundTensor*> seen;
  seen.reserve(found.size());
  for (const FoundTensor& f : found) {
    seen.emplace(f.name, &f);
    const TensorSpec* e = expected.find(f.name);
    if (!e) {
      extra.push_back(fmt::format("{} ({} [{}] in {})", f.name, dtype_name(f.dtype), fmt::join(f.shape, ", "), f.file));
      continue;
    }
    const bool dtype_ok = f.dtype == e->dtype || (e->dtype == DType::f8_e8m0 && f.dtype == DType::u8);
    if (!dtype_ok)
      wrong.push_back(fmt::format("{}: dtype {}, expected {} (in {})", f.name, dtype_name(f.dtype),
                                  dtype_name(e->dtype), f.file));
    if (f.shape != e->shape)
      wrong.push_back(fmt::format("{}: shape [{}], expected [{}] (in {})", f.name, fmt::join(f.shape, ", "),
                                  fmt::join(e->shape, ", "), f.file));
  }
  for (const TensorSpec& e : expected.tensors)
    if (!seen.count(e.name))
      missing.push_back(fmt::format("{} ({} [{}], {})", e.name, dtype_name(e.dtype), fmt::join(e.shape, ", "),
                                    expected.shard_file(e.shard)));
  if (missing.empty() && extra.empty() && wrong.empty()) return ok_status();
  std::string msg = fmt::format("checkpoint does not match the config: {} missing, {} unexpected, {} mis-typed "
                                "or mis-shaped",
                                missing.size(), extra.size(), wrong.size());
  for (const auto& s : missing) msg += "\n  missing: " + s;
  for (const auto& s : extra) msg += "\n  unexpected: " + s;
  for (const auto& s : wrong) msg += "\n  wrong: " + s;
  return Status(StatusCode::data_loss, msg);
}

int64_t weight_bytes_per_token(const Config& c, const TensorTable& t) {
  int64_t total = 0, experts = 0;
  const int64_t k = c.num_experts_per_tok, E = c.n_routed_experts;
  for (const TensorSpec& s : t.tensors) {
    const std::string& n = s.name;
    if (n.rfind("layers.", 0) != 0 && n != "head.weight" && n != "norm.weight" && n.rfind("hc_head_", 0) != 0 &&
        n != "embed.weight")
      continue;  // vision, aligner, delimiters, DSpark stages
    if (n == "embed.weight") {
      total += s.bytes() / s.shape[0];  // one row
    } else if (s.role == TensorRole::engram_table || s.role == TensorRole::engram_scale) {
      total += int64_t{c.engram_num_orders()} * c.engram_n_heads * (s.bytes() / s.shape[0]);
    } else if (s.role == TensorRole::tid2eid) {
      total += s.bytes() / s.shape[0];
    } else if (s.role == TensorRole::fp4_weight || s.role == TensorRole::fp4_scale) {
      experts += s.bytes();  // every layer has E equal experts, k of them are read
    } else {
      total += s.bytes();
    }
  }
  return total + experts / E * k;
}

bool is_vision_tensor(std::string_view n) {
  return n.starts_with("vision.") || n.starts_with("aligner.") || n.starts_with("image_");
}

ResidentSizes resident_sizes(const TensorTable& t) {
  ResidentSizes r;
  for (const TensorSpec& s : t.tensors) {
    const int64_t b = s.bytes();
    r.total += b;
    if (s.role == TensorRole::engram_table || s.role == TensorRole::engram_scale) continue;
    r.without_engram += b;
    if (!is_vision_tensor(s.name) && s.name.rfind("mtp.", 0) != 0) r.text_backbone += b;
  }
  return r;
}

}  // namespace dsv4::family
