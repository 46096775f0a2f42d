// release_tensor_source: every tensor load_weights reads, encoded exactly from the weights, by name.
#include "backends/cpu/release_encode.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/exact_encode.h"
#include "backends/cpu/load.h"
#include "family/deepseek_v41/engram_layout.h"
#include "family/deepseek_v41/tensors.h"

namespace dsv4::cpu {
namespace {

using Bytes = std::vector<uint8_t>;

// Collects the encoded tensors and every problem, each named by its tensor.
class Encoder {
 public:
  explicit Encoder(const family::TensorTable& t) : table_(t) {}

  void floats(const std::string& name, const std::vector<float>& v) {
    if (const family::TensorSpec* s = spec(name, v.size()))
      put(name, encode_floats(v, s->dtype));
  }
  void matrix(const std::string& name, const Bf16Weight& W) {
    if (W.exl3) return problem(name, "an EXL3 linear (a release checkpoint holds it dense)");
    if (shaped(name, {W.out, W.in})) floats(name, W.w);
  }
  void raw_bf16(const std::string& name, const std::vector<bf16_t>& v) {
    if (!spec(name, v.size(), DType::bf16)) return;
    Bytes b(v.size() * 2);
    std::memcpy(b.data(), v.data(), b.size());
    out_[name] = std::move(b);
  }
  void bytes(const std::string& name, const std::vector<uint8_t>& v, DType dtype) {
    if (spec(name, v.size(), dtype)) out_[name] = v;
  }
  void tid2eid(const std::string& name, const std::vector<int32_t>& v) {
    if (!spec(name, v.size(), DType::i64)) return;
    Bytes b(v.size() * 8);
    for (size_t i = 0; i < v.size(); ++i) {
      const int64_t e = v[i];
      std::memcpy(b.data() + 8 * i, &e, 8);
    }
    out_[name] = std::move(b);
  }
  void fp8(const std::string& p, const Fp8Weight& W, int64_t block_out, int64_t block_in) {
    if (W.exl3) return problem(p + ".weight", "an EXL3 linear (a release checkpoint holds it as FP8)");
    if (W.block != block_out || W.block != block_in)
      return problem(p + ".scale", fmt::format("{}x{} blocks, the config's are {}x{}", W.block, W.block, block_out,
                                               block_in));
    const int64_t B = W.block;
    if (shaped(p + ".weight", {W.out, W.in}) && shaped(p + ".scale", {(W.out + B - 1) / B, (W.in + B - 1) / B}) &&
        sized(p + ".weight", W.w.size()) && sized(p + ".scale", W.scale.size())) {
      put(p + ".weight", encode_e4m3(W.w));
      put(p + ".scale", encode_ue8m0(W.scale));
    }
  }
  // A linear the oracle holds dequantized (attn.wo_a) that the release stores as FP8.
  void fp8_dense(const std::string& p, const Bf16Weight& W, int block) {
    if (W.exl3) return problem(p + ".weight", "an EXL3 linear (a release checkpoint holds it as FP8)");
    const int64_t B = block;
    if (!shaped(p + ".weight", {W.out, W.in}) || !shaped(p + ".scale", {(W.out + B - 1) / B, (W.in + B - 1) / B}) ||
        !sized(p + ".weight", W.w.size()))
      return;
    auto r = encode_fp8_tiles(W.w, W.out, W.in, block);
    if (!r.ok()) return problem(p + ".weight", r.status().message());
    out_[p + ".weight"] = std::move(r->codes);
    out_[p + ".scale"] = std::move(r->scales);
  }
  void fp4(const std::string& p, const Fp4Weight& W) {
    if (W.exl3) return problem(p + ".weight", "an EXL3 linear (a release checkpoint holds it as FP4)");
    if (shaped(p + ".weight", {W.out, W.in / 2}) && shaped(p + ".scale", {W.out, W.in / 32}) &&
        sized(p + ".weight", W.w.size() / 2) && sized(p + ".scale", W.scale.size())) {
      put(p + ".weight", encode_e2m1_pairs(W.w));
      put(p + ".scale", encode_ue8m0(W.scale));
    }
  }
  void problem(const std::string& name, std::string_view what) { problems_.push_back(fmt::format("{}: {}", name, what)); }

  std::map<std::string, Bytes>& out() { return out_; }
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  const family::TensorSpec* spec(const std::string& name, size_t numel, std::optional<DType> dtype = {}) {
    const family::TensorSpec* s = table_.find(name);
    if (!s) return problem(name, "not a tensor of this config's release layout"), nullptr;
    if (dtype && s->dtype != *dtype)
      return problem(name, fmt::format("held as {}, stored as {}", dtype_name(*dtype), dtype_name(s->dtype))), nullptr;
    if (static_cast<int64_t>(numel) != s->numel())
      return problem(name, fmt::format("{} values, [{}] stored", numel, fmt::join(s->shape, ", "))), nullptr;
    return s;
  }
  bool shaped(const std::string& name, const std::vector<int64_t>& shape) {
    const family::TensorSpec* s = table_.find(name);
    if (!s) return problem(name, "not a tensor of this config's release layout"), false;
    if (s->shape != shape)
      return problem(name, fmt::format("[{}] held, [{}] stored", fmt::join(shape, ", "), fmt::join(s->shape, ", "))),
             false;
    return true;
  }
  // The values held for a tensor of this shape: as many as it has elements (one byte per code pair).
  bool sized(const std::string& name, size_t held) {
    const family::TensorSpec* s = table_.find(name);
    if (s && static_cast<int64_t>(held) == s->numel()) return true;
    return problem(name, fmt::format("{} values held for [{}]", held, s ? fmt::format("{}", fmt::join(s->shape, ", ")) : "?")), false;
  }
  void put(const std::string& name, StatusOr<Bytes> b) {
    if (!b.ok()) return problem(name, b.status().message());
    out_[name] = std::move(*b);
  }

  const family::TensorTable& table_;
  std::map<std::string, Bytes> out_;
  std::vector<std::string> problems_;
};

// One block's tensors under prefix p, as load_block reads them.
void encode_block(Encoder& e, const family::Config& fc, const ModelConfig& c, const LayerRole& role,
                  const std::string& p, const BlockWeights& b) {
  const int64_t bo = fc.quant.weight_block_out, bi = fc.quant.weight_block_in;
  const AttentionWeights& a = b.attn;
  e.fp8(p + "attn.wq_a", a.wq_a, bo, bi);
  e.fp8(p + "attn.wq_b", a.wq_b, bo, bi);
  e.fp8(p + "attn.wkv", a.wkv, bo, bi);
  e.fp8(p + "attn.wo_b", a.wo_b, bo, bi);
  e.fp8_dense(p + "attn.wo_a", a.wo_a, c.weight_block);
  e.floats(p + "attn.q_norm.weight", a.q_norm);
  e.floats(p + "attn.kv_norm.weight", a.kv_norm);
  e.floats(p + "attn.attn_sink", a.sink);
  if (role.kv_source && c.v4()) {
    e.matrix(p + "attn.compressor.wkv.weight", a.comp_wkv);
    e.matrix(p + "attn.compressor.wgate.weight", a.comp_wgate);
    e.floats(p + "attn.compressor.ape", a.comp_ape);
    e.floats(p + "attn.compressor.norm.weight", a.comp_norm);
    if (role.overlap) {
      e.matrix(p + "attn.indexer.compressor.wkv.weight", a.idx_comp_wkv);
      e.matrix(p + "attn.indexer.compressor.wgate.weight", a.idx_comp_wgate);
      e.floats(p + "attn.indexer.compressor.ape", a.idx_comp_ape);
      e.floats(p + "attn.indexer.compressor.norm.weight", a.idx_comp_norm);
    }
  } else if (role.kv_source) {
    e.matrix(p + "attn.compressor.wkv.weight", a.comp_wkv);
    if (role.ratio > 1) e.matrix(p + "attn.compressor.wgate.weight", a.comp_wgate);
    e.floats(p + "attn.compressor.norm.weight", a.comp_norm);
    e.matrix(p + "attn.indexer.wk.weight", a.idx_wk);
    e.floats(p + "attn.indexer.k_norm.weight", a.idx_k_norm);
  }
  if (role.index_source) {
    e.fp8(p + "attn.indexer.wq_b", a.idx_wq_b, bo, bi);
    e.matrix(p + "attn.indexer.weights_proj.weight", a.idx_weights_proj);
  }
  const MoeWeights& m = b.ffn;
  e.matrix(p + "ffn.gate.weight", m.gate);
  if (role.hash_routed) {
    e.tid2eid(p + "ffn.gate.tid2eid", m.tid2eid);
  } else {
    e.floats(p + "ffn.gate.bias", m.bias);
    if (!c.v4()) e.floats(p + "ffn.gate.bias_vl", m.bias_vl);
  }
  for (size_t x = 0; x < m.experts.size(); ++x) {
    const std::string q = p + "ffn.experts." + std::to_string(x) + ".";
    e.fp4(q + "w1", m.experts[x].w1);
    e.fp4(q + "w2", m.experts[x].w2);
    e.fp4(q + "w3", m.experts[x].w3);
  }
  e.fp8(p + "ffn.shared_experts.w1", m.shared.w1, bo, bi);
  e.fp8(p + "ffn.shared_experts.w2", m.shared.w2, bo, bi);
  e.fp8(p + "ffn.shared_experts.w3", m.shared.w3, bo, bi);
  e.floats(p + "attn_norm.weight", b.attn_norm);
  e.floats(p + "ffn_norm.weight", b.ffn_norm);
  for (auto [hp, s] : {std::pair{&b.hc_attn, "attn"}, std::pair{&b.hc_ffn, "ffn"}}) {
    e.matrix(p + "hc_" + s + "_fn", hp->fn);
    e.floats(p + "hc_" + s + "_base", hp->base);
    e.floats(p + "hc_" + s + "_scale", hp->scale);
  }
}

// The Engram layer e's tensors and the check that its hash layout is the config's.
void encode_engram(Encoder& e, const family::Config& fc, const family::EngramLayerLayout& want, int layer,
                   const EngramWeights& E) {
  const std::string p = "layers." + std::to_string(layer) + ".engram.";
  const EngramLayout& L = E.layout;
  if (L.primes != want.primes || L.offsets != want.offsets)
    e.problem(p + "embed.weight", fmt::format("hash primes [{}] / offsets [{}], the config's are [{}] / [{}]",
                                              fmt::join(L.primes, ", "), fmt::join(L.offsets, ", "),
                                              fmt::join(want.primes, ", "), fmt::join(want.offsets, ", ")));
  if (L.multipliers != want.multipliers || L.max_ngram != fc.engram_max_ngram_size || L.heads != fc.engram_n_heads)
    e.problem(p.substr(0, p.size() - 1),
              fmt::format("hash multipliers [{}], but load_weights derives [{}] from the layer id (model-spec.md "
                          "§3.4c): no tensor of the release layout holds them",
                          fmt::join(L.multipliers, ", "), fmt::join(want.multipliers, ", ")));
  e.bytes(p + "embed.weight", E.table.codes, DType::f8_e4m3);
  e.bytes(p + "embed.scale", E.table.scales, DType::f8_e8m0);
  e.fp8(p + "wkv", E.wkv, fc.quant.weight_block_out, fc.quant.weight_block_in);
  e.floats(p + "q_weight", E.q_weight);
  e.floats(p + "k_weight", E.k_weight);
}

void encode_dspark(Encoder& e, const family::Config& fc, const ModelConfig& c, const DsparkWeights& S) {
  LayerRole plain;
  for (size_t s = 0; s < S.stages.size(); ++s)
    encode_block(e, fc, c, plain, "mtp." + std::to_string(s) + ".", S.stages[s]);
  e.fp8("mtp.0.main_proj", S.main_proj, fc.quant.weight_block_out, fc.quant.weight_block_in);
  e.floats("mtp.0.main_norm.weight", S.main_norm);
  const std::string last = "mtp." + std::to_string(S.stages.size() - 1) + ".";
  e.floats(last + "norm.weight", S.norm);
  e.raw_bf16(last + "markov_head.embed.weight", S.markov_embed);
  e.matrix(last + "markov_head.head.weight", S.markov_head);
  e.matrix(last + "confidence_head.proj.weight", S.confidence);
}

// Tensors load_weights never reads for this config, written with the random profile's values.
bool unread_by_the_oracle(const family::Config& fc, const ModelConfig& c, const std::string& name) {
  for (const char* p : {"vision.", "aligner.", "image_"})
    if (name.rfind(p, 0) == 0) return true;
  return c.dspark_stages == 0 && name.rfind("mtp.", 0) == 0;  // V4-0731's drafter is checked, not loaded
}

}  // namespace

StatusOr<family::TensorSource> release_tensor_source(const family::Config& fc, const ModelWeights& w, uint64_t seed) {
  const ModelConfig c = model_config_from(fc);
  const family::TensorTable table = family::expected_tensors(fc);
  Encoder e(table);
  if (static_cast<int>(w.layers.size()) != c.n_layers)
    return error(StatusCode::invalid_argument, "the weights have {} layers, the config {}", w.layers.size(), c.n_layers);
  const auto roles = layer_roles(c);
  e.raw_bf16("embed.weight", w.embed);
  for (int l = 0; l < c.n_layers; ++l)
    encode_block(e, fc, c, roles[l], "layers." + std::to_string(l) + ".", w.layers[l]);
  e.floats("norm.weight", w.norm);
  e.matrix("head.weight", w.head);
  if (c.v4()) {
    if (!w.hc_head) return error(StatusCode::invalid_argument, "V4 weights without hc_head");
    e.matrix("hc_head_fn", w.hc_head->fn);
    e.floats("hc_head_base", w.hc_head->base);
    e.floats("hc_head_scale", {w.hc_head->scale});
  }
  family::TensorSource src;
  if (fc.has_engram()) {
    const family::EngramLayout lay = family::compute_engram_layout(fc);
    for (size_t i = 0; i < c.engram_layers.size(); ++i) {
      const BlockWeights& b = w.layers[c.engram_layers[i]];
      if (!b.engram) e.problem(fmt::format("layers.{}.engram", c.engram_layers[i]), "missing from the weights");
      else encode_engram(e, fc, lay.layers[i], c.engram_layers[i], *b.engram);
    }
    EngramTokenMap map;
    map.token_map = w.engram_token_map;
    map.vocab_size = static_cast<int32_t>(fc.vocab_size);
    map.compressed_vocab_size = static_cast<int32_t>(fc.engram_compressed_vocab_size);
    bool in_range = static_cast<int64_t>(map.token_map.size()) == fc.vocab_size;
    for (int32_t t : map.token_map) in_range = in_range && t >= 0 && t < map.compressed_vocab_size;
    if (!in_range) e.problem("engram_token_map.json", "the weights' token map is not [vocab] ids in [0, compressed)");
    else map.pad_id = map.token_map[static_cast<size_t>(fc.engram_pad_token_id)];
    src.engram_token_map = std::move(map);
  }
  if (c.dspark_stages > 0) {
    if (!w.dspark || static_cast<int>(w.dspark->stages.size()) != c.dspark_stages)
      e.problem("mtp.*", fmt::format("the config has {} DSpark stages, the weights {}", c.dspark_stages,
                                     w.dspark ? w.dspark->stages.size() : 0));
    else encode_dspark(e, fc, c, *w.dspark);
  } else if (w.dspark && !w.dspark->stages.empty()) {
    e.problem("mtp.*", "the weights have a drafter that load_weights does not read for this config");
  }
  // Every tensor the oracle reads must have been encoded (one already reported under its group is not repeated).
  for (const family::TensorSpec& t : table.tensors) {
    if (e.out().count(t.name) || unread_by_the_oracle(fc, c, t.name)) continue;
    std::string group = t.name;
    for (const char* x : {".weight", ".scale"})
      if (group.size() > std::strlen(x) && group.compare(group.size() - std::strlen(x), std::strlen(x), x) == 0)
        group.resize(group.size() - std::strlen(x));
    const auto& ps = e.problems();
    if (std::none_of(ps.begin(), ps.end(), [&group](const std::string& p) { return p.rfind(group, 0) == 0; }))
      e.problem(t.name, "no value in the weights");
  }
  if (!e.problems().empty())
    return error(StatusCode::invalid_argument, "the weights cannot be written in the release layout exactly ({} "
                 "problems):\n  {}", e.problems().size(), fmt::join(e.problems(), "\n  "));

  auto held = std::make_shared<const std::map<std::string, Bytes>>(std::move(e.out()));
  family::TensorSource random = family::synthetic_tensor_source(fc, seed);
  src.fill = [held, random = std::move(random.fill)](const family::TensorSpec& t, int64_t off, std::span<uint8_t> out) {
    const auto it = held->find(t.name);
    if (it == held->end()) return random(t, off, out);
    if (off < 0 || off + static_cast<int64_t>(out.size()) > static_cast<int64_t>(it->second.size()))
      return error(StatusCode::internal, "{}: bytes [{}, {}) of {}", t.name, off, off + out.size(), it->second.size());
    std::memcpy(out.data(), it->second.data() + off, out.size());
    return ok_status();
  };
  return src;
}

}  // namespace dsv4::cpu
