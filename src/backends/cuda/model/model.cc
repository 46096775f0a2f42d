// ModelDevice upload: one walk over the model's views lays every weight out in one arena (measured first, then
// allocated once), queues the copies of their stored bytes and carries them through pinned staging buffers;
// the Engram tables stay on the host (see model.h).
#include "backends/cuda/model/model.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "family/deepseek_v41/layer_plan.h"
#include "family/deepseek_v41/rope.h"
#include "backends/cuda/runtime/arena.h"
#include "backends/cuda/runtime/check.h"
#include "backends/cuda/exl3/exl3_view.h"
#include "backends/cuda/kernels/linear/linear.cuh"
#include "backends/cuda/model/upload.h"
#include "core/bf16.h"

namespace dsv4::cuda {

namespace {

std::string layer_name(int l, const char* what) { return "layers." + std::to_string(l) + "." + what; }

// An fp32 linear over a matrix kept as stored: bf16 (half the bytes; every release matrix read this way is
// bf16) through the bf16 view, else the fp32 one (an f32-stored matrix, or a pack's EXL3 linear, unrounded).
Status upload_either(const family::Matrix& w, Uploader& up, const std::string& name, F32View& w32, Bf16View& w16) {
  if (!w.exl3 && w.weight.dtype == DType::bf16) {
    DSV4_ASSIGN_OR_RETURN(w16, upload_bf16(w, up, name));
  } else {
    DSV4_ASSIGN_OR_RETURN(w32, upload_f32(w, up, name));
  }
  return ok_status();
}

// A vector that may be absent (the router bias of a hash-routed layer): an empty reservation then.
StatusOr<const float*> floats_or_none(const TensorView& v, Uploader& up, const std::string& name) {
  if (family::present(v)) return upload_floats(v, up, name);
  DSV4_ASSIGN_OR_RETURN(void* p, up.reserve(1, name));
  return static_cast<const float*>(p);
}


template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

}  // namespace

// Lays out and queues the pieces of one model in order; every failure names the tensor.
class ModelUploader {
 public:
  ModelUploader(ModelDevice& m, const family::ModelPlan& cfg, const family::Model& src, Uploader& up,
                const ModelDeviceOptions& o)
      : m_(m), cfg_(cfg), src_(src), up_(up), o_(o) {}

  StatusOr<HcDevice> hc(const family::Matrix& fn, const TensorView& base, const TensorView& scale,
                        const std::string& name) {
    HcDevice h;
    DSV4_ASSIGN_OR_RETURN(h.fn, upload_f32(fn, up_, name + "_fn"));
    DSV4_ASSIGN_OR_RETURN(h.base, upload_floats(base, up_, name + "_base"));
    const std::vector<float> s = host_floats(scale);
    if (s.size() != 3) return error(StatusCode::invalid_argument, "{}_scale holds {} values, not 3", name, s.size());
    for (int i = 0; i < 3; ++i) h.scale[i] = s[i];
    return h;
  }

  StatusOr<MoeDevice> moe(const family::LayerWeights& w, int K, const std::string& name) {
    MoeDevice d;
    DSV4_RETURN_IF_ERROR(upload_either(w.gate_weight, up_, name + ".gate", d.gate, d.gate16));
    DSV4_ASSIGN_OR_RETURN(d.bias, floats_or_none(w.gate_bias, up_, name + ".bias"));
    if (family::present(w.gate_bias_vl)) {
      DSV4_ASSIGN_OR_RETURN(d.bias_vl, upload_floats(w.gate_bias_vl, up_, name + ".bias_vl"));
    } else {
      DSV4_ASSIGN_OR_RETURN(d.bias_vl, floats_or_none(w.gate_bias, up_, name + ".bias_vl"));
    }
    if (held_exl3_expert(w)) {
      DSV4_ASSIGN_OR_RETURN(d.exl3, exl3_experts(w, name));
    } else {
      DSV4_RETURN_IF_ERROR(fp4_experts(w, name, d));
    }
    DSV4_ASSIGN_OR_RETURN(d.shared_w1, upload(w.shared_w1, up_, name + ".shared.w1"));
    DSV4_ASSIGN_OR_RETURN(d.shared_w2, upload(w.shared_w2, up_, name + ".shared.w2"));
    DSV4_ASSIGN_OR_RETURN(d.shared_w3, upload(w.shared_w3, up_, name + ".shared.w3"));
    d.n_active = K;
    d.n_experts = static_cast<int64_t>(w.experts.size());
    if (family::present(w.tid2eid)) {  // V4 hash-routed layer: int32 ids (checked in range when the model opened)
      const TensorView& t = w.tid2eid;
      if (t.numel() != cfg_.vocab * K)
        return error(StatusCode::invalid_argument, "{}.tid2eid holds {} ids, not vocab x {}", name, t.numel(), K);
      std::vector<int32_t> ids(static_cast<size_t>(t.numel()));
      for (size_t i = 0; i < ids.size(); ++i) {
        int64_t e;
        std::memcpy(&e, t.bytes() + 8 * i, 8);
        if (e < 0 || e >= d.n_experts)
          return error(StatusCode::invalid_argument, "{}.tid2eid names expert {} of {}", name, e, d.n_experts);
        ids[i] = static_cast<int32_t>(e);
      }
      DSV4_ASSIGN_OR_RETURN(void* p, up_.held(bytes_of(ids), name + ".tid2eid"));
      d.tid2eid = static_cast<const int32_t*>(p);
    }
    d.inter = w.shared_w1.out();  // the routed width: of the first expert held here (a tensor-parallel rank holds some)
    for (const family::Expert& x : w.experts)
      if (x.w1.held()) {
        d.inter = x.w1.out();
        break;
      }
    if (d.n_experts != w.gate_weight.out())
      return error(StatusCode::invalid_argument, "{}: gate has {} rows for {} experts", name, w.gate_weight.out(), d.n_experts);
    return d;
  }

  Status fp4_experts(const family::LayerWeights& w, const std::string& name, MoeDevice& d) {
    std::vector<Fp4View> v1, v2, v3;
    for (size_t e = 0; e < w.experts.size(); ++e) {
      const family::Expert& x = w.experts[e];
      if (!x.w1.held() && !x.w2.held() && !x.w3.held()) {  // another rank's expert: an empty view
        v1.emplace_back(), v2.emplace_back(), v3.emplace_back();
        continue;
      }
      const std::string en = name + ".experts." + std::to_string(e);
      DSV4_ASSIGN_OR_RETURN(Fp4View a, upload(x.w1, up_, en + ".w1"));
      DSV4_ASSIGN_OR_RETURN(Fp4View b, upload(x.w2, up_, en + ".w2"));
      DSV4_ASSIGN_OR_RETURN(Fp4View c, upload(x.w3, up_, en + ".w3"));
      v1.push_back(a);
      v2.push_back(b);
      v3.push_back(c);
    }
    DSV4_ASSIGN_OR_RETURN(void* p1, up_.held(bytes_of(v1), name + ".w1 views"));
    DSV4_ASSIGN_OR_RETURN(void* p2, up_.held(bytes_of(v2), name + ".w2 views"));
    DSV4_ASSIGN_OR_RETURN(void* p3, up_.held(bytes_of(v3), name + ".w3 views"));
    d.w1 = static_cast<const Fp4View*>(p1);
    d.w2 = static_cast<const Fp4View*>(p2);
    d.w3 = static_cast<const Fp4View*>(p3);
    return ok_status();
  }

  // Whether the layer's routed experts are a pack's: some expert held here is EXL3 (a tensor-parallel
  // rank holds only its own experts, the others empty: expert 0 may be one of those).
  static bool held_exl3_expert(const family::LayerWeights& w) {
    for (const family::Expert& x : w.experts)
      if (x.w1.exl3) return true;
    return false;
  }

  // A pack's routed experts: each one EXL3 linear per projection, all of one padded shape and with
  // no bias (what exl3_routed_experts takes); their Exl3Weights in device arrays [E]. An expert not held
  // here (another tensor-parallel rank's) gets an entry of zeros (bits 0), which no launch decodes; its pairs
  // never reach the launch (tp_own_pairs).
  StatusOr<Exl3ExpertsView> exl3_experts(const family::LayerWeights& w, const std::string& name) {
    Exl3ExpertsView X;
    std::vector<Exl3Weights> v[3];
    const family::Expert* first = nullptr;  // the first expert held here: the shapes every held one has
    Exl3Weights shape[3];  // each projection's padded shape, from the first expert held here (in_features 0: none yet)
    for (size_t e = 0; e < w.experts.size(); ++e) {
      const family::Expert& x = w.experts[e];
      const family::Fp4Linear* ws[3] = {&x.w1, &x.w3, &x.w2};
      const char* wn[3] = {".w1", ".w3", ".w2"};
      if (!x.w1.held() && !x.w2.held() && !x.w3.held()) {
        for (int k = 0; k < 3; ++k) v[k].push_back(Exl3Weights{});  // not held here
        continue;
      }
      if (!first) first = &x;
      for (int k = 0; k < 3; ++k) {
        const std::string en = name + ".experts." + std::to_string(e) + wn[k];
        if (!ws[k]->exl3) return error(StatusCode::invalid_argument, "{}: not EXL3 while other experts are", en);
        DSV4_ASSIGN_OR_RETURN(const Exl3View* xv, upload_exl3(*ws[k]->exl3, up_, en));
        const Exl3ViewPart& P = xv->parts[0];
        const int64_t want_in = k < 2 ? first->w1.in() : first->w1.out();
        const int64_t want_out = k < 2 ? first->w1.out() : first->w1.in();
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
    if (!first) return error(StatusCode::invalid_argument, "{}: no routed expert held", name);
    const Exl3Weights* arrays[3];
    for (int k = 0; k < 3; ++k) {
      DSV4_ASSIGN_OR_RETURN(void* p, up_.held(bytes_of(v[k]), name + ".experts EXL3 table"));
      arrays[k] = static_cast<const Exl3Weights*>(p);
    }
    X.w1 = arrays[0];
    X.w3 = arrays[1];
    X.w2 = arrays[2];
    X.n_experts = static_cast<int64_t>(w.experts.size());
    X.dim = first->w1.in();
    X.inter = first->w1.out();
    X.dim_p = shape[0].in_features;
    X.inter_p = shape[0].out_features;
    if (shape[2].in_features != X.inter_p || shape[2].out_features != X.dim_p)
      return error(StatusCode::invalid_argument, "{}: w2 is padded to [{}, {}], w1 to [{}, {}]", name,
                   shape[2].in_features, shape[2].out_features, X.dim_p, X.inter_p);
    return X;
  }

  StatusOr<std::shared_ptr<const EngramDevice>> engram(const family::LayerWeights& w, int32_t index,
                                                       const std::string& name) {
    auto e = std::make_shared<EngramDevice>();
    e->layout.max_ngram = src_.engram.max_ngram;
    e->layout.n_heads = src_.engram.n_heads;
    e->layout.cols = src_.engram.cols;
    e->layout.layers = {src_.engram.layers.at(static_cast<size_t>(index))};
    e->table = w.engram_table;
    e->table_scale = w.engram_table_scale;
    e->table_rows = w.engram_table.dim(0);
    e->dim = static_cast<int>(w.engram_table.dim(1));
    if (o_.pin_engram && !up_.measuring()) DSV4_RETURN_IF_ERROR(pin_table(*e, name));
    DSV4_ASSIGN_OR_RETURN(e->wkv, upload(w.engram_wkv, up_, name + ".wkv"));
    const std::vector<float> q = host_floats(w.engram_q_weight), k = host_floats(w.engram_k_weight);
    if (q.size() != k.size()) return error(StatusCode::invalid_argument, "{}: q and k weights differ in size", name);
    std::vector<float> qk(q.size());
    for (size_t i = 0; i < qk.size(); ++i) qk[i] = q[i] * k[i];  // float, as the oracle forms it
    DSV4_ASSIGN_OR_RETURN(e->qk, up_.floats(std::move(qk), name + ".qk"));
    return std::shared_ptr<const EngramDevice>(std::move(e));
  }

  // --engram pinned: the table's pages locked in host memory and mapped for the device. The mapped file's own pages
  // are registered (read-only: one copy per host, shared by every process mapping the file); where a system
  // refuses that, a pinned copy is made instead.
  Status pin_table(EngramDevice& e, const std::string& name) {
    // One registration over the pages of both tensors (a shard holds them side by side; registering them apart
    // would register their shared page twice).
    constexpr uintptr_t kPage = 4096;
    const auto lo = [](const TensorView& v) { return reinterpret_cast<uintptr_t>(v.data); };
    const uintptr_t begin = std::min(lo(e.table), lo(e.table_scale)) & ~(kPage - 1);
    const uintptr_t end = (std::max(lo(e.table) + e.table.nbytes, lo(e.table_scale) + e.table_scale.nbytes) + kPage - 1) &
                          ~(kPage - 1);
    const bool together = end - begin <= static_cast<uintptr_t>(e.table.nbytes + e.table_scale.nbytes) + (uintptr_t{64} << 20);
    void* base = reinterpret_cast<void*>(begin);
    if (together && cudaHostRegister(base, end - begin, cudaHostRegisterMapped | cudaHostRegisterPortable |
                                                            cudaHostRegisterReadOnly) == cudaSuccess) {
      m_.registered.push_back(base);
      m_.pinned_bytes += end - begin;
      void* dev = nullptr;
      DSV4_RETURN_IF_ERROR(cuda_status(cudaHostGetDevicePointer(&dev, base, 0), name + ": mapping the Engram table"));
      e.codes = static_cast<const uint8_t*>(dev) + (lo(e.table) - begin);
      e.scales = static_cast<const uint8_t*>(dev) + (lo(e.table_scale) - begin);
      return ok_status();
    }
    (void)cudaGetLastError();  // refused (or held apart): a pinned copy instead
    const size_t cb = static_cast<size_t>(e.table.nbytes), sb = static_cast<size_t>(e.table_scale.nbytes);
    void* host = nullptr;
    const cudaError_t err = cudaHostAlloc(&host, cb + sb, cudaHostAllocMapped | cudaHostAllocPortable);
    if (err != cudaSuccess)
      return error(StatusCode::resource_exhausted, "{}: pinned host memory for a {}-byte Engram table: {}", name, cb + sb,
                   cudaGetErrorString(err));
    m_.pinned.push_back(host);
    m_.pinned_bytes += cb + sb;
    for (const auto& [view, at] : {std::pair{&e.table, size_t{0}}, std::pair{&e.table_scale, cb}}) {
      ReadJob j;
      j.src = view->data;
      j.bytes = view->nbytes;
      for (const TensorStore* s : stores())
        if ((j.file = s->locate(view->data))) break;
      DSV4_RETURN_IF_ERROR(read_job(j, static_cast<uint8_t*>(host) + at).with_context(name));
    }
    void* dev = nullptr;
    DSV4_RETURN_IF_ERROR(cuda_status(cudaHostGetDevicePointer(&dev, host, 0), name + ": mapping the Engram table"));
    e.codes = static_cast<const uint8_t*>(dev);
    e.scales = static_cast<const uint8_t*>(dev) + cb;
    return ok_status();
  }

  // A block: attention goes to `attn_out` (upload_attention: a backbone layer, or a DSpark stage at layer >=
  // n_layers, window-only), the rest is returned.
  StatusOr<LayerDevice> block(const family::LayerWeights& b, int layer, int K, const std::string& name,
                              std::vector<AttentionDevice>& attn_out) {
    LayerDevice L;
    DSV4_ASSIGN_OR_RETURN(AttentionDevice a, upload_attention(b, cfg_, layer, up_));
    attn_out.push_back(a);
    DSV4_ASSIGN_OR_RETURN(L.hc_attn, hc(b.hc_attn_fn, b.hc_attn_base, b.hc_attn_scale, name + ".hc_attn"));
    DSV4_ASSIGN_OR_RETURN(L.hc_ffn, hc(b.hc_ffn_fn, b.hc_ffn_base, b.hc_ffn_scale, name + ".hc_ffn"));
    DSV4_ASSIGN_OR_RETURN(L.attn_norm, upload_floats(b.attn_norm, up_, name + ".attn_norm"));
    DSV4_ASSIGN_OR_RETURN(L.ffn_norm, upload_floats(b.ffn_norm, up_, name + ".ffn_norm"));
    DSV4_ASSIGN_OR_RETURN(L.ffn, moe(b, K, name + ".ffn"));
    if (family::present(b.engram_table)) {
      int32_t index = -1;
      for (size_t i = 0; i < cfg_.engram_layers.size(); ++i)
        if (cfg_.engram_layers[i] == layer) index = static_cast<int32_t>(i);
      if (index < 0) return error(StatusCode::invalid_argument, "{}: an Engram table on a layer the config has none", name);
      DSV4_ASSIGN_OR_RETURN(L.engram, engram(b, index, name + ".engram"));
    }
    return L;
  }

 private:
  std::vector<const TensorStore*> stores() const {
    std::vector<const TensorStore*> s{src_.store.get()};
    for (const auto& x : src_.extra) s.push_back(x.get());
    return s;
  }

  ModelDevice& m_;
  const family::ModelPlan& cfg_;
  const family::Model& src_;
  Uploader& up_;
  const ModelDeviceOptions& o_;
};

namespace {

// Lays out (and, when `up` is not measuring, queues) every weight of `src` into `m`.
Status build(ModelDevice& m, const family::Model& src, const ModelDeviceOptions& o, Uploader& up) {
  const family::ModelPlan& cfg = m.config;
  const family::ModelWeights& w = src.weights;
  m.freqs_plain = family::rope_frequencies(family::rope_params(cfg, false));
  m.freqs_yarn = family::rope_frequencies(family::rope_params(cfg, true));
  DSV4_ASSIGN_OR_RETURN(m.d_freqs_plain, up.floats(m.freqs_plain, "rope.freqs_plain"));
  DSV4_ASSIGN_OR_RETURN(m.d_freqs_yarn, up.floats(m.freqs_yarn, "rope.freqs_yarn"));
  if (w.embed.dtype != DType::bf16 || w.embed.rank() != 2 || w.embed.dim(1) != cfg.dim)
    return error(StatusCode::invalid_argument, "embed.weight: {} {}, expected BF16 [rows, {}]", dtype_name(w.embed.dtype),
                 shape_string(w.embed.shape), cfg.dim);
  DSV4_ASSIGN_OR_RETURN(void* emb, up.stored(w.embed, "embed"));
  m.embed = static_cast<const uint16_t*>(emb);
  m.embed_rows = w.embed.dim(0);
  ModelUploader mu(m, cfg, src, up, o);
  for (int l = 0; l < cfg.n_layers; ++l) {
    DSV4_ASSIGN_OR_RETURN(LayerDevice L, mu.block(w.layers[l], l, src.plan.layers[l].num_experts_per_tok,
                                                  layer_name(l, ""), m.attention));
    m.layers.push_back(std::move(L));
  }
  DSV4_ASSIGN_OR_RETURN(m.norm, upload_floats(w.norm, up, "norm"));
  DSV4_RETURN_IF_ERROR(upload_either(w.head, up, "head", m.head, m.head16));
  if (cfg.premix == family::HcPremix::own) {  // the head collapses with its own pre-mix (hc_head)
    auto hh = std::make_unique<HcHeadDevice>();
    DSV4_ASSIGN_OR_RETURN(hh->fn, upload_f32(w.hc_head_fn, up, "hc_head_fn"));
    DSV4_ASSIGN_OR_RETURN(hh->base, upload_floats(w.hc_head_base, up, "hc_head_base"));
    const std::vector<float> scale = host_floats(w.hc_head_scale);
    if (static_cast<int>(w.hc_head_base.numel()) != cfg.hc_mult || w.hc_head_fn.out() != cfg.hc_mult || scale.size() != 1)
      return error(StatusCode::invalid_argument, "hc_head: {} outputs / {} bases / {} scales for hc_mult {}",
                   w.hc_head_fn.out(), w.hc_head_base.numel(), scale.size(), cfg.hc_mult);
    hh->scale = scale[0];
    m.hc_head = std::move(hh);
  }
  // The plan runs the drafter where its forward is confirmed (dspark_stages > 0; not V4-0731's, docs/cpu-oracle.md).
  const bool drafter = o.dspark && cfg.dspark_stages > 0 && static_cast<int>(w.dspark.size()) == cfg.dspark_stages;
  if (drafter) {
    auto d = std::make_unique<DsparkDevice>();
    for (size_t st = 0; st < w.dspark.size(); ++st) {
      const std::string name = "mtp." + std::to_string(st);
      DSV4_ASSIGN_OR_RETURN(LayerDevice L, mu.block(w.dspark[st], cfg.n_layers + static_cast<int>(st),
                                                    src.plan.dspark[st].num_experts_per_tok, name, d->attention));
      d->stages.push_back(std::move(L));
    }
    const family::LayerWeights& first = w.dspark.front();
    const family::LayerWeights& last = w.dspark.back();
    DSV4_ASSIGN_OR_RETURN(d->main_proj, upload(first.main_proj, up, "mtp.main_proj"));
    DSV4_ASSIGN_OR_RETURN(d->main_norm, upload_floats(first.main_norm, up, "mtp.main_norm"));
    DSV4_ASSIGN_OR_RETURN(d->norm, upload_floats(last.final_norm, up, "mtp.norm"));
    DSV4_ASSIGN_OR_RETURN(void* me, up.stored(last.markov_embed, "mtp.markov_embed"));
    d->markov_embed = static_cast<const uint16_t*>(me);
    DSV4_RETURN_IF_ERROR(upload_either(last.markov_head, up, "mtp.markov_head", d->markov_head, d->markov_head16));
    DSV4_ASSIGN_OR_RETURN(d->confidence, upload_f32(last.confidence_proj, up, "mtp.confidence"));
    m.dspark = std::move(d);
  }
  return ok_status();
}

StatusOr<family::ModelPlan> checked_config(const family::Model& src) {
  const family::ModelPlan cfg = family::build_plan(src.config);
  DSV4_RETURN_IF_ERROR(family::check_plan(cfg));
  if (static_cast<int>(src.weights.layers.size()) != cfg.n_layers)
    return error(StatusCode::invalid_argument, "weights hold {} layers, config says {}", src.weights.layers.size(),
                 cfg.n_layers);
  if (!cfg.engram_layers.empty() && static_cast<int64_t>(src.engram_token_map.size()) != cfg.vocab)
    return error(StatusCode::invalid_argument, "Engram needs a token map of {} entries, got {}", cfg.vocab,
                 src.engram_token_map.size());
  return cfg;
}

}  // namespace

StatusOr<size_t> ModelDevice::weight_bytes_of(const family::Model& src, const ModelDeviceOptions& o) {
  DSV4_ASSIGN_OR_RETURN(const family::ModelPlan cfg, checked_config(src));
  ModelDevice m;
  m.config = cfg;
  m.arena = std::make_unique<Arena>(Arena::measuring());
  Uploader up(*m.arena);
  DSV4_RETURN_IF_ERROR(build(m, src, o, up));
  return m.arena->used();
}

StatusOr<std::unique_ptr<ModelDevice>> ModelDevice::upload(std::shared_ptr<const family::Model> src,
                                                           const ModelDeviceOptions& o) {
  if (!src) return error(StatusCode::invalid_argument, "no model");
  DSV4_ASSIGN_OR_RETURN(const size_t total, weight_bytes_of(*src, o));
  DSV4_RETURN_IF_ERROR(cuda_status(cudaSetDevice(o.device), "selecting the CUDA device"));
  auto m = std::make_unique<ModelDevice>();
  DSV4_ASSIGN_OR_RETURN(m->config, checked_config(*src));
  m->engram_token_map = src->engram_token_map;
  m->source = src;
  const size_t bytes = total + (1 << 20);
  m->arena = std::make_unique<Arena>(bytes);
  if (m->arena->capacity() < bytes)
    return error(StatusCode::resource_exhausted, "cannot allocate {} MiB of device memory for the weights", bytes >> 20);
  std::vector<const TensorStore*> stores{src->store.get()};
  for (const auto& x : src->extra) stores.push_back(x.get());
  Uploader up(*m->arena, stores);
  DSV4_RETURN_IF_ERROR(build(*m, *src, o, up));
  DSV4_ASSIGN_OR_RETURN(m->upload_stats, up.run(o.staging));
  DSV4_RETURN_IF_ERROR(cuda_status(cudaDeviceSynchronize(), "after the weight upload"));
  return m;
}

ModelDevice::~ModelDevice() {
  for (void* p : registered) cudaHostUnregister(p);
  for (void* p : pinned) cudaFreeHost(p);
}

cudaError_t f32_linear_either(const float* x, int64_t rows, const F32View& w32, const Bf16View& w16, float* y,
                              cudaStream_t s) {
  return w16.w ? f32_linear(x, rows, w16, y, s) : f32_linear(x, rows, w32, y, s);
}

size_t ModelDevice::weight_bytes() const { return arena ? arena->used() : 0; }

}  // namespace dsv4::cuda
