// Checkpoint loading for the oracle (see load.h).
#include "backends/cpu/load.h"

#include <fmt/ranges.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include "backends/cpu/load_exl3.h"
#include "core/checkpoint.h"
#include "family/deepseek_v41/exl3_sources.h"
#include "family/deepseek_v41/engram_layout.h"
#include "family/deepseek_v41/tensors.h"
#include "tokenizer/engram_token_map.h"
#include "tokenizer/v41_tokenizer.h"

namespace dsv4::cpu {

namespace {

// Reads tensors of the checkpoint (then of `extra`: an EXL3 pack's release shards); with an EXL3
// pack plan, linears the plan lists as EXL3 come back as EXL3 weights.
class Reader {
 public:
  Reader(const Checkpoint& ck, const LoadProgressFn& progress, const family::Exl3PackPlan* plan = nullptr,
         std::vector<const Checkpoint*> extra = {})
      : ck_(ck), progress_(progress), plan_(plan), extra_(std::move(extra)) {
    done_.tensors_total = ck.tensor_count();
    done_.bytes_total = ck.total_bytes();
  }
  bool has(const std::string& name) const { return ck_.contains(name); }
  // The EXL3 weight standing for release linear `group` (nullptr when it is not EXL3-coded).
  StatusOr<std::shared_ptr<const Exl3Weight>> exl3(const std::string& group) const {
    if (!plan_) return std::shared_ptr<const Exl3Weight>();
    for (const family::Exl3Group* g : plan_->groups_of(group))
      for (const char* s : {"trellis", "suh", "svh", "su", "sv", "mcg", "mul1", "bias"})
        if (ck_.contains(g->prefix + "." + s)) DSV4_RETURN_IF_ERROR(view(g->prefix + "." + s).status());
    return load_exl3_weight(ck_, *plan_, group);
  }

  StatusOr<TensorView> get(const std::string& name, DType want) const {
    DSV4_ASSIGN_OR_RETURN(TensorView v, view(name));
    const bool scale_alias = want == DType::f8_e8m0 && v.dtype == DType::u8;
    if (v.dtype != want && !scale_alias)
      return error(StatusCode::data_loss, "tensor '{}': dtype {}, expected {}", name, dtype_name(v.dtype),
                   dtype_name(want));
    return v;
  }
  // BF16 or F32 values widened to float.
  StatusOr<std::vector<float>> floats(const std::string& name) const {
    DSV4_ASSIGN_OR_RETURN(TensorView v, view(name));
    std::vector<float> out(v.numel());
    if (v.dtype == DType::bf16) {
      for (int64_t i = 0; i < v.numel(); ++i) {
        uint16_t b;
        std::memcpy(&b, v.bytes() + 2 * i, 2);
        out[i] = bf16_to_f32(b);
      }
    } else if (v.dtype == DType::f32) {
      std::memcpy(out.data(), v.bytes(), 4 * out.size());
    } else {
      return error(StatusCode::data_loss, "tensor '{}': dtype {}, expected BF16 or F32", name, dtype_name(v.dtype));
    }
    return out;
  }
  StatusOr<Bf16Weight> matrix(const std::string& name) const {
    if (name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0) {
      DSV4_ASSIGN_OR_RETURN(auto e, exl3(name.substr(0, name.size() - 7)));
      if (e) return Bf16Weight{e->out, e->in, {}, e};
    }
    DSV4_ASSIGN_OR_RETURN(TensorView v, view(name));
    if (v.rank() != 2) return error(StatusCode::data_loss, "tensor '{}' is not a matrix", name);
    Bf16Weight w;
    w.out = v.dim(0);
    w.in = v.dim(1);
    DSV4_ASSIGN_OR_RETURN(w.w, floats(name));
    return w;
  }
  StatusOr<std::vector<bf16_t>> bf16_raw(const std::string& name) const {
    DSV4_ASSIGN_OR_RETURN(TensorView v, get(name, DType::bf16));
    std::vector<bf16_t> out(v.numel());
    std::memcpy(out.data(), v.bytes(), 2 * out.size());
    return out;
  }
  StatusOr<Fp8Weight> fp8(const std::string& prefix, int block) const {
    DSV4_ASSIGN_OR_RETURN(auto e, exl3(prefix));
    if (e) return Fp8Weight{e->out, e->in, block, {}, {}, e};
    DSV4_ASSIGN_OR_RETURN(TensorView w, get(prefix + ".weight", DType::f8_e4m3));
    DSV4_ASSIGN_OR_RETURN(TensorView s, get(prefix + ".scale", DType::f8_e8m0));
    Fp8Weight out;
    out.out = w.dim(0);
    out.in = w.dim(1);
    out.block = block;
    out.w.resize(w.numel());
    for (int64_t i = 0; i < w.numel(); ++i) out.w[i] = e4m3_to_f32(w.bytes()[i]);
    out.scale.resize(s.numel());
    for (int64_t i = 0; i < s.numel(); ++i) out.scale[i] = ue8m0_to_f32(s.bytes()[i]);
    return out;
  }
  StatusOr<Fp4Weight> fp4(const std::string& prefix) const {
    DSV4_ASSIGN_OR_RETURN(auto e, exl3(prefix));
    if (e) return Fp4Weight{e->out, e->in, {}, {}, e};
    DSV4_ASSIGN_OR_RETURN(TensorView w, get(prefix + ".weight", DType::i8));
    DSV4_ASSIGN_OR_RETURN(TensorView s, get(prefix + ".scale", DType::f8_e8m0));
    Fp4Weight out;
    out.out = w.dim(0);
    out.in = w.dim(1) * 2;
    out.w.resize(out.out * out.in);
    for (int64_t i = 0; i < w.numel(); ++i) {
      out.w[2 * i] = e2m1_to_f32(w.bytes()[i] & 15);
      out.w[2 * i + 1] = e2m1_to_f32(w.bytes()[i] >> 4);
    }
    out.scale.resize(s.numel());
    for (int64_t i = 0; i < s.numel(); ++i) out.scale[i] = ue8m0_to_f32(s.bytes()[i]);
    return out;
  }

 private:
  // Every read goes through here; a tensor counts toward progress the first time it is read.
  StatusOr<TensorView> view(const std::string& name) const {
    const Checkpoint* from = &ck_;
    for (const Checkpoint* e : extra_)
      if (!ck_.contains(name) && e->contains(name)) from = e;
    DSV4_ASSIGN_OR_RETURN(TensorView v, from->tensor(name));
    if (progress_ && seen_.insert(name).second) {
      if (from != &ck_) ++done_.tensors_total, done_.bytes_total += v.nbytes;  // only what is read counts
      ++done_.tensors_done;
      done_.bytes_done += v.nbytes;
      progress_(done_);
    }
    return v;
  }

  const Checkpoint& ck_;
  const LoadProgressFn& progress_;
  const family::Exl3PackPlan* plan_;
  std::vector<const Checkpoint*> extra_;
  mutable std::set<std::string> seen_;
  mutable LoadProgress done_;
};

Status load_block(const Reader& r, const ModelConfig& c, const LayerRole& role, const std::string& p,
                  int n_active, BlockWeights& b) {
  const int wb = c.weight_block;
  AttentionWeights& a = b.attn;
  DSV4_ASSIGN_OR_RETURN(a.wq_a, r.fp8(p + "attn.wq_a", wb));
  DSV4_ASSIGN_OR_RETURN(a.wq_b, r.fp8(p + "attn.wq_b", wb));
  DSV4_ASSIGN_OR_RETURN(a.wkv, r.fp8(p + "attn.wkv", wb));
  DSV4_ASSIGN_OR_RETURN(a.wo_b, r.fp8(p + "attn.wo_b", wb));
  DSV4_ASSIGN_OR_RETURN(Fp8Weight woa, r.fp8(p + "attn.wo_a", wb));
  // The reference holds wo_a dequantized to bf16 (convert.py); e4m3 x 2^k is exact in bf16.
  // An EXL3 pack holds it as per-group slices instead (block-diagonal parts of one Exl3Weight).
  a.wo_a.out = woa.out;
  a.wo_a.in = woa.in;
  a.wo_a.exl3 = woa.exl3;
  if (!woa.exl3) a.wo_a.w.resize(woa.out * woa.in);
  for (int64_t n = 0; n < woa.out && !woa.exl3; ++n)
    for (int64_t k = 0; k < woa.in; ++k) a.wo_a.w[n * woa.in + k] = round_bf16(woa.at(n, k));
  DSV4_ASSIGN_OR_RETURN(a.q_norm, r.floats(p + "attn.q_norm.weight"));
  DSV4_ASSIGN_OR_RETURN(a.kv_norm, r.floats(p + "attn.kv_norm.weight"));
  DSV4_ASSIGN_OR_RETURN(a.sink, r.floats(p + "attn.attn_sink"));
  if (role.kv_source && c.v4()) {
    DSV4_ASSIGN_OR_RETURN(a.comp_wkv, r.matrix(p + "attn.compressor.wkv.weight"));
    DSV4_ASSIGN_OR_RETURN(a.comp_wgate, r.matrix(p + "attn.compressor.wgate.weight"));
    DSV4_ASSIGN_OR_RETURN(a.comp_ape, r.floats(p + "attn.compressor.ape"));
    DSV4_ASSIGN_OR_RETURN(a.comp_norm, r.floats(p + "attn.compressor.norm.weight"));
    if (role.overlap) {
      DSV4_ASSIGN_OR_RETURN(a.idx_comp_wkv, r.matrix(p + "attn.indexer.compressor.wkv.weight"));
      DSV4_ASSIGN_OR_RETURN(a.idx_comp_wgate, r.matrix(p + "attn.indexer.compressor.wgate.weight"));
      DSV4_ASSIGN_OR_RETURN(a.idx_comp_ape, r.floats(p + "attn.indexer.compressor.ape"));
      DSV4_ASSIGN_OR_RETURN(a.idx_comp_norm, r.floats(p + "attn.indexer.compressor.norm.weight"));
    }
  } else if (role.kv_source) {
    DSV4_ASSIGN_OR_RETURN(a.comp_wkv, r.matrix(p + "attn.compressor.wkv.weight"));
    if (role.ratio > 1) {
      DSV4_ASSIGN_OR_RETURN(a.comp_wgate, r.matrix(p + "attn.compressor.wgate.weight"));
    }
    DSV4_ASSIGN_OR_RETURN(a.comp_norm, r.floats(p + "attn.compressor.norm.weight"));
    DSV4_ASSIGN_OR_RETURN(a.idx_wk, r.matrix(p + "attn.indexer.wk.weight"));
    DSV4_ASSIGN_OR_RETURN(a.idx_k_norm, r.floats(p + "attn.indexer.k_norm.weight"));
  }
  if (role.index_source) {
    DSV4_ASSIGN_OR_RETURN(a.idx_wq_b, r.fp8(p + "attn.indexer.wq_b", wb));
    DSV4_ASSIGN_OR_RETURN(a.idx_weights_proj, r.matrix(p + "attn.indexer.weights_proj.weight"));
  }
  MoeWeights& m = b.ffn;
  DSV4_ASSIGN_OR_RETURN(m.gate, r.matrix(p + "ffn.gate.weight"));
  m.n_active = n_active;
  if (role.hash_routed) {
    DSV4_ASSIGN_OR_RETURN(TensorView t, r.get(p + "ffn.gate.tid2eid", DType::i64));
    m.tid2eid.resize(t.numel());
    for (int64_t i = 0; i < t.numel(); ++i) {
      int64_t e;
      std::memcpy(&e, t.bytes() + 8 * i, 8);
      if (e < 0 || e >= m.gate.out)
        return error(StatusCode::data_loss, "{}ffn.gate.tid2eid: expert {} outside [0, {})", p, e, m.gate.out);
      m.tid2eid[i] = static_cast<int32_t>(e);
    }
  } else {
    DSV4_ASSIGN_OR_RETURN(m.bias, r.floats(p + "ffn.gate.bias"));
    if (c.v4()) {
      // V4 has no image-token router bias.
    } else if (r.has(p + "ffn.gate.bias_vl")) {
      DSV4_ASSIGN_OR_RETURN(m.bias_vl, r.floats(p + "ffn.gate.bias_vl"));
    } else {
      m.bias_vl = m.bias;  // EXL3 packs leave the image-token router bias out (formats.md §1.12)
    }
  }
  for (int64_t e = 0; e < m.gate.out; ++e) {
    ExpertWeights x;
    const std::string q = p + "ffn.experts." + std::to_string(e) + ".";
    DSV4_ASSIGN_OR_RETURN(x.w1, r.fp4(q + "w1"));
    DSV4_ASSIGN_OR_RETURN(x.w2, r.fp4(q + "w2"));
    DSV4_ASSIGN_OR_RETURN(x.w3, r.fp4(q + "w3"));
    m.experts.push_back(std::move(x));
  }
  DSV4_ASSIGN_OR_RETURN(m.shared.w1, r.fp8(p + "ffn.shared_experts.w1", wb));
  DSV4_ASSIGN_OR_RETURN(m.shared.w2, r.fp8(p + "ffn.shared_experts.w2", wb));
  DSV4_ASSIGN_OR_RETURN(m.shared.w3, r.fp8(p + "ffn.shared_experts.w3", wb));
  DSV4_ASSIGN_OR_RETURN(b.attn_norm, r.floats(p + "attn_norm.weight"));
  DSV4_ASSIGN_OR_RETURN(b.ffn_norm, r.floats(p + "ffn_norm.weight"));
  for (auto [hp, s] : {std::pair{&b.hc_attn, "attn"}, std::pair{&b.hc_ffn, "ffn"}}) {
    DSV4_ASSIGN_OR_RETURN(hp->fn, r.matrix(p + "hc_" + s + "_fn"));
    DSV4_ASSIGN_OR_RETURN(hp->base, r.floats(p + "hc_" + s + "_base"));
    DSV4_ASSIGN_OR_RETURN(hp->scale, r.floats(p + "hc_" + s + "_scale"));
  }
  return ok_status();
}

// A JSON object whose "token_map" holds vocab ids in [0, compressed); `first` is the error of the
// strict parser, reported when this shape does not fit either.
}  // namespace

StatusOr<std::shared_ptr<ModelWeights>> load_weights(const std::string& dir, const LoadProgressFn& progress) {
  return load_weights(dir, LoadOptions{}, progress);
}

StatusOr<std::shared_ptr<ModelWeights>> load_weights(const std::string& dir, const LoadOptions& options,
                                                     const LoadProgressFn& progress) {
  // An EXL3 pack (quantization_config.quant_method "exl3") is checked against the Mia layout and
  // takes its Engram tables from the release shards; anything else is a release-layout checkpoint.
  std::string config_text;
  if (std::ifstream in{dir + "/config.json", std::ios::binary}) config_text.assign(std::istreambuf_iterator<char>(in), {});
  std::optional<family::Exl3PackPlan> plan;
  family::Config fc;
  if (family::is_exl3_config_text(config_text)) {
    auto pc = family::parse_exl3_pack_config(config_text);
    if (!pc.ok()) return pc.status().with_context(dir + "/config.json");
    fc = pc->config;
    DSV4_ASSIGN_OR_RETURN(plan, family::exl3_pack_plan(fc));
  } else {
    DSV4_ASSIGN_OR_RETURN(fc, family::load_config(dir + "/config.json"));
  }
  DSV4_RETURN_IF_ERROR(family::validate_config(fc));
  auto w = std::make_shared<ModelWeights>();
  w->config = model_config_from(fc);
  const ModelConfig& c = w->config;
  DSV4_RETURN_IF_ERROR(c.validate());
  DSV4_ASSIGN_OR_RETURN(Checkpoint ck, Checkpoint::open(dir));
  std::vector<family::FoundTensor> found;
  for (const std::string& n : ck.names()) {
    DSV4_ASSIGN_OR_RETURN(CheckpointTensor t, ck.find(n));
    found.push_back({n, t.view.dtype, t.view.shape, std::filesystem::path(t.file->path()).filename().string()});
  }
  std::vector<Checkpoint> release_shards;
  if (plan) {
    DSV4_RETURN_IF_ERROR(family::validate_exl3_pack(*plan, found).with_context(dir));
    DSV4_RETURN_IF_ERROR(family::check_pack_tensor_storage(dir, *plan, found));
    if (!plan->release_shards.empty()) {
      if (options.engram_shards.empty())
        return error(StatusCode::invalid_argument, "{}: an EXL3 pack without its Engram tables (layers {}); give the "
                     "directory of the original release shards that hold them (--engram-shards DIR)", dir,
                     fmt::join(fc.engram_layer_ids, ", "));
      DSV4_ASSIGN_OR_RETURN(family::EngramSources src, family::engram_sources_for(dir, fc, plan->release));
      DSV4_ASSIGN_OR_RETURN(release_shards, family::open_engram_shards(options.engram_shards, src, plan->release,
                                                                       options.notes));
    }
  } else {
    DSV4_RETURN_IF_ERROR(family::validate_tensors(family::expected_tensors(fc), found));
  }
  std::vector<const Checkpoint*> extra;
  for (const Checkpoint& e : release_shards) extra.push_back(&e);
  Reader r(ck, progress, plan ? &*plan : nullptr, extra);
  const auto roles = layer_roles(c);
  DSV4_ASSIGN_OR_RETURN(w->embed, r.bf16_raw("embed.weight"));
  w->layers.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l)
    DSV4_RETURN_IF_ERROR(load_block(r, c, roles[l], "layers." + std::to_string(l) + ".", c.n_active, w->layers[l]));
  DSV4_ASSIGN_OR_RETURN(w->norm, r.floats("norm.weight"));
  DSV4_ASSIGN_OR_RETURN(w->head, r.matrix("head.weight"));
  if (c.v4()) {
    auto hh = std::make_unique<HcHeadWeights>();
    DSV4_ASSIGN_OR_RETURN(hh->fn, r.matrix("hc_head_fn"));
    DSV4_ASSIGN_OR_RETURN(hh->base, r.floats("hc_head_base"));
    DSV4_ASSIGN_OR_RETURN(std::vector<float> sc, r.floats("hc_head_scale"));
    hh->scale = sc.at(0);
    w->hc_head = std::move(hh);
  }
  if (!c.engram_layers.empty()) {
    const family::EngramLayout lay = family::compute_engram_layout(fc);
    for (size_t e = 0; e < c.engram_layers.size(); ++e) {
      const std::string p = "layers." + std::to_string(c.engram_layers[e]) + ".engram.";
      auto E = std::make_unique<EngramWeights>();
      E->layout.max_ngram = lay.max_ngram;
      E->layout.heads = lay.n_heads;
      E->layout.primes = lay.layers[e].primes;
      E->layout.offsets = lay.layers[e].offsets;
      E->layout.multipliers = lay.layers[e].multipliers;
      DSV4_ASSIGN_OR_RETURN(TensorView tw, r.get(p + "embed.weight", DType::f8_e4m3));
      DSV4_ASSIGN_OR_RETURN(TensorView ts, r.get(p + "embed.scale", DType::f8_e8m0));
      E->table.rows = tw.dim(0);
      E->table.dim = static_cast<int>(tw.dim(1));
      E->table.codes.assign(tw.bytes(), tw.bytes() + tw.nbytes);
      E->table.scales.assign(ts.bytes(), ts.bytes() + ts.nbytes);
      DSV4_ASSIGN_OR_RETURN(E->wkv, r.fp8(p + "wkv", c.weight_block));
      DSV4_ASSIGN_OR_RETURN(E->q_weight, r.floats(p + "q_weight"));
      DSV4_ASSIGN_OR_RETURN(E->k_weight, r.floats(p + "k_weight"));
      w->layers[c.engram_layers[e]].engram = std::move(E);
    }
    // engram_token_map.json when the checkpoint carries one, else derived from the V4.1 tokenizer.
    std::optional<Tokenizer> tok;
    if (!std::ifstream(dir + "/" + std::string(kEngramTokenMapFile))) {
      DSV4_ASSIGN_OR_RETURN(Tokenizer t, load_v41_tokenizer());
      tok = std::move(t);
    }
    DSV4_ASSIGN_OR_RETURN(EngramTokenMap map, load_engram_token_map(dir, tok ? &*tok : nullptr, c.vocab,
                                                                    c.engram_compressed_vocab, c.engram_pad_id));
    w->engram_token_map = std::move(map.token_map);
  }
  if (c.dspark_stages > 0) {
    auto S = std::make_unique<DsparkWeights>();
    LayerRole plain;
    S->stages.resize(c.dspark_stages);
    for (int s = 0; s < c.dspark_stages; ++s)
      DSV4_RETURN_IF_ERROR(load_block(r, c, plain, "mtp." + std::to_string(s) + ".", c.dspark_active, S->stages[s]));
    DSV4_ASSIGN_OR_RETURN(S->main_proj, r.fp8("mtp.0.main_proj", c.weight_block));
    DSV4_ASSIGN_OR_RETURN(S->main_norm, r.floats("mtp.0.main_norm.weight"));
    const std::string last = "mtp." + std::to_string(c.dspark_stages - 1) + ".";
    DSV4_ASSIGN_OR_RETURN(S->norm, r.floats(last + "norm.weight"));
    DSV4_ASSIGN_OR_RETURN(S->markov_embed, r.bf16_raw(last + "markov_head.embed.weight"));
    DSV4_ASSIGN_OR_RETURN(S->markov_head, r.matrix(last + "markov_head.head.weight"));
    DSV4_ASSIGN_OR_RETURN(S->confidence, r.matrix(last + "confidence_head.proj.weight"));
    w->dspark = std::move(S);
  }
  return w;
}

}  // namespace dsv4::cpu
