// ModelDevice upload: sizes every weight, takes one arena, re-encodes each tensor into it and
// puts the Engram tables in pinned host memory (see model.h).
#include "backends/cuda/model.h"

#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "backends/cpu/rope.h"
#include "backends/cuda/arena.h"
#include "backends/cuda/check.h"
#include "backends/cuda/exl3_view.h"
#include "backends/cuda/linear.cuh"
#include "backends/cuda/upload.h"

namespace dsv4::cuda {

namespace {

constexpr size_t kPad = 512;  // per tensor: alignment slack

// An EXL3 linear of a pack: its stored tensors (the dense sizes below do not apply).
size_t bytes_exl3(const cpu::Exl3Weight& w) {
  size_t n = 0;
  for (const cpu::Exl3Part& p : w.parts)
    n += 2 * (p.packed.trellis.size() + p.packed.suh.size() + p.packed.svh.size()) + 4 * p.bias.size() + 4 * kPad;
  return n;
}

size_t bytes_of(const cpu::Fp8Weight& w) {
  if (w.exl3) return bytes_exl3(*w.exl3);
  const size_t sb = static_cast<size_t>((w.out + w.block - 1) / w.block) * ((w.in + w.block - 1) / w.block);
  return static_cast<size_t>(w.out * w.in) + sb + 2 * kPad;
}
size_t bytes_of(const cpu::Fp4Weight& w) {
  if (w.exl3) return bytes_exl3(*w.exl3) + sizeof(Exl3Weights);
  return static_cast<size_t>(w.out * w.in / 2) + static_cast<size_t>(w.out * (w.in / 32)) + 2 * kPad;
}
size_t bytes_f32(const cpu::Bf16Weight& w) { return w.exl3 ? bytes_exl3(*w.exl3) : static_cast<size_t>(w.out * w.in) * 4 + kPad; }
size_t bytes_bf16(const cpu::Bf16Weight& w) { return w.exl3 ? bytes_exl3(*w.exl3) : static_cast<size_t>(w.out * w.in) * 2 + kPad; }
size_t bytes_vec(size_t n) { return n * 4 + kPad; }

size_t bytes_of(const cpu::AttentionWeights& a) {
  // Every tensor in both widths plus the vectors: an upper bound whatever the layer's role keeps.
  size_t n = bytes_of(a.wq_a) + bytes_of(a.wq_b) + bytes_of(a.wkv) + bytes_of(a.wo_b) + bytes_of(a.idx_wq_b);
  n += bytes_bf16(a.wo_a) + bytes_f32(a.comp_wkv) + bytes_f32(a.comp_wgate) + bytes_bf16(a.comp_wkv) +
       bytes_bf16(a.comp_wgate) + bytes_bf16(a.idx_wk) + bytes_bf16(a.idx_weights_proj);
  n += bytes_vec(a.q_norm.size()) + bytes_vec(a.kv_norm.size()) + bytes_vec(a.sink.size()) +
       bytes_vec(a.comp_norm.size()) + bytes_vec(a.idx_k_norm.size()) + bytes_vec(256);
  n += bytes_f32(a.idx_comp_wkv) + bytes_f32(a.idx_comp_wgate) + bytes_vec(a.comp_ape.size()) +
       bytes_vec(a.idx_comp_ape.size()) + bytes_vec(a.idx_comp_norm.size());  // V4
  return n + (64 << 10);
}

size_t bytes_of(const cpu::HcParams& h) { return bytes_f32(h.fn) + bytes_vec(h.base.size()); }

size_t bytes_of(const cpu::MoeWeights& m) {
  size_t n = bytes_f32(m.gate) + bytes_vec(m.bias.size()) + bytes_vec(m.bias_vl.size());
  for (const cpu::ExpertWeights& e : m.experts) n += bytes_of(e.w1) + bytes_of(e.w2) + bytes_of(e.w3);
  n += 3 * (m.experts.size() * sizeof(Fp4View) + kPad) + m.tid2eid.size() * 4 + kPad;
  return n + bytes_of(m.shared.w1) + bytes_of(m.shared.w2) + bytes_of(m.shared.w3);
}

size_t bytes_of(const cpu::BlockWeights& b) {
  size_t n = bytes_of(b.attn) + bytes_of(b.ffn) + bytes_vec(b.attn_norm.size()) + bytes_vec(b.ffn_norm.size()) +
             bytes_of(b.hc_attn) + bytes_of(b.hc_ffn);
  if (b.engram) n += bytes_of(b.engram->wkv) + bytes_vec(b.engram->q_weight.size());
  return n;
}

std::string layer_name(int l, const char* what) { return "layers." + std::to_string(l) + "." + what; }

// Uploads an fp32-linear weight as bf16 when every value is a bf16 value, else as fp32.
Status upload_either(const cpu::F32Weight& w, Arena& A, const std::string& name, F32View& w32, Bf16View& w16) {
  if (w.exl3) {  // a pack's linear: the fp32 view's call runs it unrounded
    DSV4_ASSIGN_OR_RETURN(w32, upload_f32(w, A, name));
    return ok_status();
  }
  auto b = upload_bf16(w, A, name);
  if (b.ok()) {
    w16 = *b;
    return ok_status();
  }
  if (b.status().code() != StatusCode::invalid_argument) return b.status();
  DSV4_ASSIGN_OR_RETURN(w32, upload_f32(w, A, name));
  return ok_status();
}

}  // namespace

// Uploads the pieces of one model in order; every failure names the tensor.
class ModelUploader {
 public:
  ModelUploader(ModelDevice& m, const cpu::ModelConfig& cfg) : m_(m), cfg_(cfg), A_(*m.arena) {}

  StatusOr<HcDevice> hc(const cpu::HcParams& p, const std::string& name) {
    HcDevice h;
    DSV4_ASSIGN_OR_RETURN(h.fn, upload_f32(p.fn, A_, name + ".fn"));
    DSV4_ASSIGN_OR_RETURN(h.base, upload(std::span<const float>(p.base), A_, name + ".base"));
    if (p.scale.size() != 3) return error(StatusCode::invalid_argument, "{}.scale holds {} values, not 3", name, p.scale.size());
    for (int i = 0; i < 3; ++i) h.scale[i] = p.scale[i];
    return h;
  }

  StatusOr<MoeDevice> moe(const cpu::MoeWeights& w, const std::string& name) {
    MoeDevice d;
    DSV4_RETURN_IF_ERROR(upload_either(w.gate, A_, name + ".gate", d.gate, d.gate16));
    DSV4_ASSIGN_OR_RETURN(d.bias, upload(std::span<const float>(w.bias), A_, name + ".bias"));
    const std::vector<float>& vl = w.bias_vl.empty() ? w.bias : w.bias_vl;
    DSV4_ASSIGN_OR_RETURN(d.bias_vl, upload(std::span<const float>(vl), A_, name + ".bias_vl"));
    if (held_exl3_expert(w)) {
      DSV4_ASSIGN_OR_RETURN(d.exl3, exl3_experts(w, name));
    } else {
      DSV4_RETURN_IF_ERROR(fp4_experts(w, name, d));
    }
    DSV4_ASSIGN_OR_RETURN(d.shared_w1, upload(w.shared.w1, A_, name + ".shared.w1"));
    DSV4_ASSIGN_OR_RETURN(d.shared_w2, upload(w.shared.w2, A_, name + ".shared.w2"));
    DSV4_ASSIGN_OR_RETURN(d.shared_w3, upload(w.shared.w3, A_, name + ".shared.w3"));
    d.n_active = w.n_active;
    if (!w.tid2eid.empty()) {  // V4 hash-routed layer
      if (static_cast<int64_t>(w.tid2eid.size()) != cfg_.vocab * w.n_active)
        return error(StatusCode::invalid_argument, "{}.tid2eid holds {} ids, not vocab x {}", name, w.tid2eid.size(),
                     w.n_active);
      for (int32_t e : w.tid2eid)
        if (e < 0 || e >= static_cast<int64_t>(w.experts.size()))
          return error(StatusCode::invalid_argument, "{}.tid2eid names expert {} of {}", name, e, w.experts.size());
      DSV4_ASSIGN_OR_RETURN(void* t, upload_bytes(w.tid2eid.data(), w.tid2eid.size() * 4, A_, name + ".tid2eid"));
      d.tid2eid = static_cast<const int32_t*>(t);
    }
    d.n_experts = static_cast<int64_t>(w.experts.size());
    d.inter = w.shared.w1.out;  // the routed width: of the first expert held here (a tensor-parallel rank holds some)
    for (const cpu::ExpertWeights& x : w.experts)
      if (x.w1.out > 0) {
        d.inter = x.w1.out;
        break;
      }
    if (d.n_experts != w.gate.out)
      return error(StatusCode::invalid_argument, "{}: gate has {} rows for {} experts", name, w.gate.out, d.n_experts);
    return d;
  }

  Status fp4_experts(const cpu::MoeWeights& w, const std::string& name, MoeDevice& d) {
    std::vector<Fp4View> v1, v2, v3;
    for (size_t e = 0; e < w.experts.size(); ++e) {
      const std::string en = name + ".experts." + std::to_string(e);
      DSV4_ASSIGN_OR_RETURN(Fp4View a, upload(w.experts[e].w1, A_, en + ".w1"));
      DSV4_ASSIGN_OR_RETURN(Fp4View b, upload(w.experts[e].w2, A_, en + ".w2"));
      DSV4_ASSIGN_OR_RETURN(Fp4View c, upload(w.experts[e].w3, A_, en + ".w3"));
      v1.push_back(a);
      v2.push_back(b);
      v3.push_back(c);
    }
    const size_t vb = v1.size() * sizeof(Fp4View);
    DSV4_ASSIGN_OR_RETURN(void* p1, upload_bytes(v1.data(), vb, A_, name + ".w1 views"));
    DSV4_ASSIGN_OR_RETURN(void* p2, upload_bytes(v2.data(), vb, A_, name + ".w2 views"));
    DSV4_ASSIGN_OR_RETURN(void* p3, upload_bytes(v3.data(), vb, A_, name + ".w3 views"));
    d.w1 = static_cast<const Fp4View*>(p1);
    d.w2 = static_cast<const Fp4View*>(p2);
    d.w3 = static_cast<const Fp4View*>(p3);
    return ok_status();
  }

  // Whether the layer's routed experts are a pack's: some expert held here is EXL3 (a tensor-parallel
  // rank holds only its own experts, the others empty: expert 0 may be one of those).
  static bool held_exl3_expert(const cpu::MoeWeights& w) {
    for (const cpu::ExpertWeights& x : w.experts)
      if (x.w1.exl3) return true;
    return false;
  }

  // A pack's routed experts: each one EXL3 linear per projection, all of one padded shape and with
  // no bias (what exl3_routed_experts takes); their Exl3Weights in device arrays [E]. An expert left
  // empty (0 x 0: another tensor-parallel rank holds it, fabric/rank_weights.h) gets an entry of zeros
  // (bits 0), which no launch decodes; its pairs never reach the launch (tp_own_pairs).
  StatusOr<Exl3ExpertsView> exl3_experts(const cpu::MoeWeights& w, const std::string& name) {
    Exl3ExpertsView X;
    std::vector<Exl3Weights> v[3];
    const cpu::ExpertWeights* first = nullptr;  // the first expert held here: the shapes every held one has
    Exl3Weights shape[3];  // each projection's padded shape, from the first expert held here (in_features 0: none yet)
    for (size_t e = 0; e < w.experts.size(); ++e) {
      const cpu::ExpertWeights& x = w.experts[e];
      const cpu::Fp4Weight* ws[3] = {&x.w1, &x.w3, &x.w2};
      const char* wn[3] = {".w1", ".w3", ".w2"};
      if (x.w1.out == 0 && x.w2.out == 0 && x.w3.out == 0 && !x.w1.exl3 && !x.w2.exl3 && !x.w3.exl3) {
        for (int k = 0; k < 3; ++k) v[k].push_back(Exl3Weights{});  // not held here
        continue;
      }
      if (!first) first = &x;
      for (int k = 0; k < 3; ++k) {
        const std::string en = name + ".experts." + std::to_string(e) + wn[k];
        if (!ws[k]->exl3) return error(StatusCode::invalid_argument, "{}: not EXL3 while other experts are", en);
        DSV4_ASSIGN_OR_RETURN(const Exl3View* xv, upload_exl3(*ws[k]->exl3, A_, en));
        const Exl3ViewPart& P = xv->parts[0];
        const int64_t want_in = k < 2 ? first->w1.in : first->w1.out;
        const int64_t want_out = k < 2 ? first->w1.out : first->w1.in;
        if (xv->n_parts != 1 || P.bias || P.in != want_in || P.out != want_out ||
            (shape[k].in_features > 0 &&
             (P.w.in_features != shape[k].in_features || P.w.out_features != shape[k].out_features)))
          return error(StatusCode::invalid_argument,
                       "{}: routed experts on CUDA need one unbiased part of [{}, {}] and one padded shape per projection",
                       en, want_in, want_out);
        v[k].push_back(P.w);
        if (shape[k].in_features == 0) shape[k] = P.w;
        X.kinds[k] |= exl3_kind_bit(P.w.bits, P.w.codebook);
      }
      X.gate_up_same_kind = (first == &x || X.gate_up_same_kind) && v[0].back().bits == v[1].back().bits &&
                            v[0].back().codebook == v[1].back().codebook;
    }
    const Exl3Weights* arrays[3];
    for (int k = 0; k < 3; ++k) {
      DSV4_ASSIGN_OR_RETURN(void* p, upload_bytes(v[k].data(), v[k].size() * sizeof(Exl3Weights), A_,
                                                  name + ".experts EXL3 table"));
      arrays[k] = static_cast<const Exl3Weights*>(p);
    }
    X.w1 = arrays[0];
    X.w3 = arrays[1];
    X.w2 = arrays[2];
    X.n_experts = static_cast<int64_t>(w.experts.size());
    X.dim = first->w1.in;
    X.inter = first->w1.out;
    X.dim_p = shape[0].in_features;
    X.inter_p = shape[0].out_features;
    if (shape[2].in_features != X.inter_p || shape[2].out_features != X.dim_p)
      return error(StatusCode::invalid_argument, "{}: w2 is padded to [{}, {}], w1 to [{}, {}]", name,
                   shape[2].in_features, shape[2].out_features, X.dim_p, X.inter_p);
    return X;
  }

  StatusOr<std::shared_ptr<const EngramDevice>> engram(const cpu::EngramWeights& w, const std::string& name) {
    auto e = std::make_shared<EngramDevice>();
    e->layout = w.layout;
    e->table_rows = w.table.rows;
    e->dim = w.table.dim;
    const size_t cb = w.table.codes.size(), sb = w.table.scales.size();
    void* host = nullptr;
    const cudaError_t err = cudaHostAlloc(&host, cb + sb, cudaHostAllocMapped | cudaHostAllocPortable);
    if (err != cudaSuccess)
      return error(StatusCode::resource_exhausted, "{}: pinned host memory for a {}-byte Engram table: {}", name, cb + sb,
                   cudaGetErrorString(err));
    m_.pinned.push_back(host);
    m_.pinned_bytes += cb + sb;
    std::memcpy(host, w.table.codes.data(), cb);
    std::memcpy(static_cast<uint8_t*>(host) + cb, w.table.scales.data(), sb);
    void* dev = nullptr;
    DSV4_RETURN_IF_ERROR(cuda_status(cudaHostGetDevicePointer(&dev, host, 0), name + ": mapping the Engram table"));
    e->codes = static_cast<const uint8_t*>(dev);
    e->scales = static_cast<const uint8_t*>(dev) + cb;
    DSV4_ASSIGN_OR_RETURN(e->wkv, upload(w.wkv, A_, name + ".wkv"));
    if (w.q_weight.size() != w.k_weight.size())
      return error(StatusCode::invalid_argument, "{}: q and k weights differ in size", name);
    std::vector<float> qk(w.q_weight.size());
    for (size_t i = 0; i < qk.size(); ++i) qk[i] = w.q_weight[i] * w.k_weight[i];  // float, as the oracle forms it
    DSV4_ASSIGN_OR_RETURN(e->qk, upload(std::span<const float>(qk), A_, name + ".qk"));
    return std::shared_ptr<const EngramDevice>(std::move(e));
  }

  // A DSpark stage's window-only attention (no compressor, no indexer; plain RoPE).
  StatusOr<AttentionDevice> stage_attention(const cpu::AttentionWeights& w, const std::string& name) {
    AttentionDevice a;
    DSV4_ASSIGN_OR_RETURN(a.wq_a, upload(w.wq_a, A_, name + ".wq_a"));
    DSV4_ASSIGN_OR_RETURN(a.wq_b, upload(w.wq_b, A_, name + ".wq_b"));
    DSV4_ASSIGN_OR_RETURN(a.wkv, upload(w.wkv, A_, name + ".wkv"));
    DSV4_ASSIGN_OR_RETURN(a.wo_b, upload(w.wo_b, A_, name + ".wo_b"));
    DSV4_ASSIGN_OR_RETURN(a.wo_a, upload_bf16(w.wo_a, A_, name + ".wo_a"));
    DSV4_ASSIGN_OR_RETURN(a.q_norm, upload(std::span<const float>(w.q_norm), A_, name + ".q_norm"));
    DSV4_ASSIGN_OR_RETURN(a.kv_norm, upload(std::span<const float>(w.kv_norm), A_, name + ".kv_norm"));
    DSV4_ASSIGN_OR_RETURN(a.sink, upload(std::span<const float>(w.sink), A_, name + ".sink"));
    a.freqs = m_.d_freqs_plain;
    return a;
  }

  // A block: attention goes to `attn_out` (backbone layers through upload_attention, DSpark
  // stages, layer >= n_layers, window-only), the rest is returned.
  StatusOr<LayerDevice> block(const cpu::BlockWeights& b, int layer, const std::string& name,
                              std::vector<AttentionDevice>& attn_out) {
    LayerDevice L;
    if (layer < cfg_.n_layers) {
      DSV4_ASSIGN_OR_RETURN(AttentionDevice a, upload_attention(b.attn, cfg_, layer, A_));
      attn_out.push_back(a);
    } else {
      DSV4_ASSIGN_OR_RETURN(AttentionDevice a, stage_attention(b.attn, name + ".attn"));
      attn_out.push_back(a);
    }
    DSV4_ASSIGN_OR_RETURN(L.hc_attn, hc(b.hc_attn, name + ".hc_attn"));
    DSV4_ASSIGN_OR_RETURN(L.hc_ffn, hc(b.hc_ffn, name + ".hc_ffn"));
    DSV4_ASSIGN_OR_RETURN(L.attn_norm, upload(std::span<const float>(b.attn_norm), A_, name + ".attn_norm"));
    DSV4_ASSIGN_OR_RETURN(L.ffn_norm, upload(std::span<const float>(b.ffn_norm), A_, name + ".ffn_norm"));
    DSV4_ASSIGN_OR_RETURN(L.ffn, moe(b.ffn, name + ".ffn"));
    if (b.engram) {
      DSV4_ASSIGN_OR_RETURN(L.engram, engram(*b.engram, name + ".engram"));
    }
    return L;
  }

 private:
  ModelDevice& m_;
  const cpu::ModelConfig& cfg_;
  Arena& A_;
};

StatusOr<std::unique_ptr<ModelDevice>> ModelDevice::upload(const cpu::ModelWeights& w, const ModelDeviceOptions& o) {
  const cpu::ModelConfig& cfg = w.config;
  DSV4_RETURN_IF_ERROR(cfg.validate());
  if (cfg.v4() && !w.hc_head) return error(StatusCode::invalid_argument, "V4 weights without hc_head");
  if (static_cast<int>(w.layers.size()) != cfg.n_layers)
    return error(StatusCode::invalid_argument, "weights hold {} layers, config says {}", w.layers.size(), cfg.n_layers);
  if (!cfg.engram_layers.empty() && static_cast<int64_t>(w.engram_token_map.size()) != cfg.vocab)
    return error(StatusCode::invalid_argument, "Engram needs a token map of {} entries, got {}", cfg.vocab,
                 w.engram_token_map.size());
  DSV4_RETURN_IF_ERROR(cuda_status(cudaSetDevice(o.device), "selecting the CUDA device"));
  auto m = std::make_unique<ModelDevice>();
  m->config = cfg;
  m->roles = cpu::layer_roles(cfg);
  m->engram_token_map = w.engram_token_map;
  // Size the arena from the host weights.
  size_t total = static_cast<size_t>(w.embed.size()) * 2 + kPad + bytes_vec(w.norm.size()) + bytes_f32(w.head) + (1 << 20);
  for (const cpu::BlockWeights& b : w.layers) total += bytes_of(b);
  if (w.hc_head) total += bytes_f32(w.hc_head->fn) + bytes_vec(w.hc_head->base.size());
  const bool drafter = o.dspark && w.dspark && !cfg.v4();  // the 0731 drafter is not run (docs/cpu-oracle.md)
  if (drafter) {
    const cpu::DsparkWeights& S = *w.dspark;
    for (const cpu::BlockWeights& b : S.stages) total += bytes_of(b);
    total += bytes_of(S.main_proj) + bytes_vec(S.main_norm.size()) + bytes_vec(S.norm.size()) +
             S.markov_embed.size() * 2 + kPad + bytes_f32(S.markov_head) + bytes_f32(S.confidence);
  }
  m->arena = std::make_unique<Arena>(total);
  if (m->arena->capacity() < total)
    return error(StatusCode::resource_exhausted, "cannot allocate {} MiB of device memory for the weights", total >> 20);
  Arena& A = *m->arena;
  cpu::RopeParams plain{cfg.rope_dim, cfg.rope_theta, 0, cfg.rope_factor, cfg.beta_fast, cfg.beta_slow};
  cpu::RopeParams yarn{cfg.rope_dim, cfg.compress_rope_theta, cfg.original_seq_len, cfg.rope_factor, cfg.beta_fast,
                       cfg.beta_slow};
  m->freqs_plain = cpu::rope_frequencies(plain);
  m->freqs_yarn = cpu::rope_frequencies(yarn);
  DSV4_ASSIGN_OR_RETURN(m->d_freqs_plain, cuda::upload(std::span<const float>(m->freqs_plain), A, "rope.freqs_plain"));
  DSV4_ASSIGN_OR_RETURN(m->d_freqs_yarn, cuda::upload(std::span<const float>(m->freqs_yarn), A, "rope.freqs_yarn"));
  DSV4_ASSIGN_OR_RETURN(void* emb, upload_bytes(w.embed.data(), w.embed.size() * 2, A, "embed"));
  m->embed = static_cast<const uint16_t*>(emb);
  m->embed_rows = static_cast<int64_t>(w.embed.size()) / cfg.dim;
  ModelUploader up(*m, cfg);
  for (int l = 0; l < cfg.n_layers; ++l) {
    DSV4_ASSIGN_OR_RETURN(LayerDevice L, up.block(w.layers[l], l, layer_name(l, ""), m->attention));
    m->layers.push_back(std::move(L));
  }
  DSV4_ASSIGN_OR_RETURN(m->norm, cuda::upload(std::span<const float>(w.norm), A, "norm"));
  DSV4_RETURN_IF_ERROR(upload_either(w.head, A, "head", m->head, m->head16));
  if (cfg.v4()) {
    auto hh = std::make_unique<HcHeadDevice>();
    DSV4_ASSIGN_OR_RETURN(hh->fn, upload_f32(w.hc_head->fn, A, "hc_head_fn"));
    DSV4_ASSIGN_OR_RETURN(hh->base, cuda::upload(std::span<const float>(w.hc_head->base), A, "hc_head_base"));
    if (static_cast<int>(w.hc_head->base.size()) != cfg.hc_mult || w.hc_head->fn.out != cfg.hc_mult)
      return error(StatusCode::invalid_argument, "hc_head: {} outputs / {} bases for hc_mult {}", w.hc_head->fn.out,
                   w.hc_head->base.size(), cfg.hc_mult);
    hh->scale = w.hc_head->scale;
    m->hc_head = std::move(hh);
  }
  if (drafter) {
    const cpu::DsparkWeights& S = *w.dspark;
    auto d = std::make_unique<DsparkDevice>();
    for (size_t st = 0; st < S.stages.size(); ++st) {
      const std::string name = "mtp." + std::to_string(st);
      DSV4_ASSIGN_OR_RETURN(LayerDevice L, up.block(S.stages[st], cfg.n_layers + static_cast<int>(st), name, d->attention));
      d->stages.push_back(std::move(L));
    }
    DSV4_ASSIGN_OR_RETURN(d->main_proj, cuda::upload(S.main_proj, A, "mtp.main_proj"));
    DSV4_ASSIGN_OR_RETURN(d->main_norm, cuda::upload(std::span<const float>(S.main_norm), A, "mtp.main_norm"));
    DSV4_ASSIGN_OR_RETURN(d->norm, cuda::upload(std::span<const float>(S.norm), A, "mtp.norm"));
    DSV4_ASSIGN_OR_RETURN(void* me, upload_bytes(S.markov_embed.data(), S.markov_embed.size() * 2, A, "mtp.markov_embed"));
    d->markov_embed = static_cast<const uint16_t*>(me);
    DSV4_RETURN_IF_ERROR(upload_either(S.markov_head, A, "mtp.markov_head", d->markov_head, d->markov_head16));
    DSV4_ASSIGN_OR_RETURN(d->confidence, upload_f32(S.confidence, A, "mtp.confidence"));
    m->dspark = std::move(d);
  }
  DSV4_RETURN_IF_ERROR(cuda_status(cudaDeviceSynchronize(), "after the weight upload"));
  return m;
}

ModelDevice::~ModelDevice() {
  for (void* p : pinned) cudaFreeHost(p);
}

cudaError_t f32_linear_either(const float* x, int64_t rows, const F32View& w32, const Bf16View& w16, float* y,
                              cudaStream_t s) {
  return w16.w ? f32_linear(x, rows, w16, y, s) : f32_linear(x, rows, w32, y, s);
}

size_t ModelDevice::weight_bytes() const { return arena ? arena->used() : 0; }

}  // namespace dsv4::cuda
