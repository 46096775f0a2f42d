// ModelDevice::synthesize: full-width random weights generated on the device for `dsv4 bench` —
// the same views as an upload, filled by synth_fill with valid finite values, no host copies.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "family/deepseek_v41/rope.h"
#include "backends/cuda/runtime/arena.h"
#include "backends/cuda/runtime/check.h"
#include "backends/cuda/model/model.h"
#include "backends/cuda/model/synth_fill.cuh"

namespace dsv4::cuda {

namespace {

// Two passes over the same calls: the first counts bytes (no device memory), the second fills.
class SynthAlloc {
 public:
  SynthAlloc(Arena* arena, uint64_t seed) : arena_(arena), seed_(seed) {}
  size_t counted() const { return counted_; }
  const Status& status() const { return status_; }

  void* bytes(int64_t n, FillKind kind) {
    const size_t b = static_cast<size_t>(n > 0 ? n : 1);
    counted_ += b + 256;
    if (!arena_) return reinterpret_cast<void*>(256);  // counting pass: never dereferenced
    void* p = arena_->alloc(b);
    if (!p) {
      if (status_.ok()) status_ = error(StatusCode::resource_exhausted, "synthetic weights: arena full at {} bytes", counted_);
      return nullptr;
    }
    const cudaError_t e = synth_fill(p, n, kind, ++seed_, nullptr);
    if (e != cudaSuccess && status_.ok()) status_ = launch_status(e, "synth_fill", shape_text({{"bytes", n}}));
    return p;
  }
  // FP8 [out, in] with square scale blocks of `block` (V4.1: 32, V4 / 0731: 128).
  Fp8View fp8(int64_t out, int64_t in, int32_t block = 32) {
    Fp8View v;
    v.out = out;
    v.in = in;
    v.block = block;
    v.w = static_cast<const uint8_t*>(bytes(out * in, FillKind::e4m3));
    v.scale = static_cast<const uint8_t*>(bytes(((out + block - 1) / block) * ((in + block - 1) / block), FillKind::ue8m0));
    return v;
  }
  // Host-made bytes copied to the device (the counting pass only counts them).
  void* copied(const void* src, int64_t n) {
    void* p = bytes(n, FillKind::e2m1x2);
    if (arena_ && p && cudaMemcpy(p, src, static_cast<size_t>(n), cudaMemcpyHostToDevice) != cudaSuccess && status_.ok())
      status_ = error(StatusCode::internal, "synthetic weights: copying {} bytes to the device", n);
    return p;
  }
  Fp4View fp4(int64_t out, int64_t in) {
    Fp4View v;
    v.out = out;
    v.in = in;
    v.w = static_cast<const uint8_t*>(bytes(out * in / 2, FillKind::e2m1x2));
    v.scale = static_cast<const uint8_t*>(bytes(out * (in / 32), FillKind::ue8m0));
    return v;
  }
  Bf16View bf16(int64_t out, int64_t in) {
    return Bf16View{static_cast<const uint16_t*>(bytes(out * in * 2, FillKind::bf16)), out, in};
  }
  F32View f32(int64_t out, int64_t in) {
    return F32View{static_cast<const float*>(bytes(out * in * 4, FillKind::f32)), out, in};
  }
  const float* vec(int64_t n, FillKind kind = FillKind::f32) { return static_cast<const float*>(bytes(n * 4, kind)); }

 private:
  Arena* arena_;
  uint64_t seed_;
  size_t counted_ = 0;
  Status status_ = ok_status();
};

void synth_model(SynthAlloc& S, ModelDevice& m) {
  const family::ModelPlan& c = m.config;
  const int64_t D = c.dim, Q = c.q_lora, H = c.n_heads, d = c.head_dim, C = c.hc_mult, nm = C * (C + 2);
  const int64_t G = c.o_groups, O = c.o_lora, E = c.n_experts, I = c.moe_inter, ihd = c.index_head_dim;
  const int32_t wb = c.weight_block;  // FP8 scale blocks (V4 / 0731: 128x128)
  m.embed = static_cast<const uint16_t*>(S.bytes(c.vocab * D * 2, FillKind::bf16));
  m.embed_rows = c.vocab;
  m.attention.clear();
  m.layers.clear();
  for (int l = 0; l < c.n_layers; ++l) {
    const family::LayerPlan& r = c.layers[l];
    AttentionDevice a;
    a.wq_a = S.fp8(Q, D, wb);
    a.wq_b = S.fp8(H * d, Q, wb);
    a.wkv = S.fp8(d, D, wb);
    a.wo_b = S.fp8(D, G * O, wb);
    a.wo_a = S.bf16(G * O, H * d / G);
    a.q_norm = S.vec(Q, FillKind::f32_one);
    a.kv_norm = S.vec(d, FillKind::f32_one);
    a.sink = S.vec(H);
    a.freqs = r.compress_ratio > 0 ? m.d_freqs_yarn : m.d_freqs_plain;
    if (r.kv_source && r.compressor_ape) {
      // V4: bf16 compressor weights [w, D] (w = 2d overlapped at ratio 4) with position bias
      // [ratio, w]; ratio 4 also the indexer's overlapped compressor [2*ihd, D] (model-spec.md §8).
      const int64_t w = r.compressor_overlap ? 2 * d : d;
      a.comp_wkv = S.bf16(w, D);
      a.comp_wgate = S.bf16(w, D);
      a.comp_ape = S.vec(r.compress_ratio * w);
      a.comp_norm = S.vec(d, FillKind::f32_one);
      if (r.compressor_overlap) {
        a.idx_comp_wkv = S.bf16(2 * ihd, D);
        a.idx_comp_wgate = S.bf16(2 * ihd, D);
        a.idx_comp_ape = S.vec(r.compress_ratio * 2 * ihd);
        a.idx_comp_norm = S.vec(ihd, FillKind::f32_one);
      }
    } else if (r.kv_source) {
      if (r.compress_ratio > 1) {
        a.comp_wkv32 = S.f32(d, D);
        a.comp_wgate32 = S.f32(d, D);
      } else {
        a.comp_wkv = S.bf16(d, D);
      }
      a.comp_norm = S.vec(d, FillKind::f32_one);
      a.idx_wk = S.bf16(ihd, d);
      a.idx_k_norm = S.vec(ihd, FillKind::f32_one);
    }
    if (r.index_source) {
      a.idx_wq_b = S.fp8(static_cast<int64_t>(c.index_heads) * ihd, Q, wb);
      a.idx_weights_proj = S.bf16(c.index_heads, D);
    }
    m.attention.push_back(a);
    LayerDevice L;
    for (HcDevice* h : {&L.hc_attn, &L.hc_ffn}) {
      h->fn = S.f32(nm, C * D);
      h->base = S.vec(nm);
      h->scale[0] = h->scale[1] = h->scale[2] = 0.5f;
    }
    L.attn_norm = S.vec(D, FillKind::f32_one);
    L.ffn_norm = S.vec(D, FillKind::f32_one);
    MoeDevice& M = L.ffn;
    M.gate16 = S.bf16(E, D);
    M.bias = S.vec(E);
    M.bias_vl = M.bias;
    std::vector<Fp4View> w1, w2, w3;
    for (int64_t e = 0; e < E; ++e) {
      w1.push_back(S.fp4(I, D));
      w3.push_back(S.fp4(I, D));
      w2.push_back(S.fp4(D, I));
    }
    const int64_t vb = E * static_cast<int64_t>(sizeof(Fp4View));
    Fp4View* views[3];
    for (int k = 0; k < 3; ++k) views[k] = static_cast<Fp4View*>(S.bytes(vb, FillKind::e2m1x2));
    if (views[0] && reinterpret_cast<uintptr_t>(views[0]) != 256) {
      cudaMemcpy(views[0], w1.data(), vb, cudaMemcpyHostToDevice);
      cudaMemcpy(views[1], w3.data(), vb, cudaMemcpyHostToDevice);
      cudaMemcpy(views[2], w2.data(), vb, cudaMemcpyHostToDevice);
    }
    M.w1 = views[0];
    M.w3 = views[1];
    M.w2 = views[2];
    M.shared_w1 = S.fp8(I, D, wb);
    M.shared_w3 = S.fp8(I, D, wb);
    M.shared_w2 = S.fp8(D, I, wb);
    if (r.hash_routed) {  // V4 layers 0-2: expert ids per token, K distinct ones spread over E
      std::vector<int32_t> ids(static_cast<size_t>(c.vocab) * c.n_active);
      for (int64_t t = 0; t < c.vocab; ++t)
        for (int k = 0; k < c.n_active; ++k)
          ids[t * c.n_active + k] = static_cast<int32_t>((t * 7 + k * (E / c.n_active)) % E);
      M.tid2eid = static_cast<const int32_t*>(S.copied(ids.data(), static_cast<int64_t>(ids.size()) * 4));
    }
    M.n_active = c.n_active;
    M.n_experts = E;
    M.inter = I;
    m.layers.push_back(L);
  }
  m.norm = S.vec(D, FillKind::f32_one);
  m.head16 = S.bf16(c.vocab, D);
  if (c.premix == family::HcPremix::own) {  // the final collapse's own pre-mix (hc_head)
    auto hh = std::make_unique<HcHeadDevice>();
    hh->fn = S.f32(C, C * D);
    hh->base = S.vec(C);
    hh->scale = 0.5f;
    m.hc_head = std::move(hh);
  }
}

}  // namespace

StatusOr<std::unique_ptr<ModelDevice>> ModelDevice::synthesize(const family::ModelPlan& cfg, uint64_t seed, int device) {
  DSV4_RETURN_IF_ERROR(family::check_plan(cfg));
  if (!cfg.engram_layers.empty())
    return error(StatusCode::invalid_argument, "synthetic device weights carry no Engram tables; clear engram_layers");
  DSV4_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device), "selecting the CUDA device"));
  auto m = std::make_unique<ModelDevice>();
  m->config = cfg;
  m->config.dspark_target_layers.clear();
  m->freqs_plain = family::rope_frequencies(family::rope_params(cfg, false));
  m->freqs_yarn = family::rope_frequencies(family::rope_params(cfg, true));
  SynthAlloc count(nullptr, seed);
  synth_model(count, *m);
  const size_t total = count.counted() + 2 * m->freqs_plain.size() * 4 + (1 << 20);
  m->arena = std::make_unique<Arena>(total);
  if (m->arena->capacity() < total)
    return error(StatusCode::resource_exhausted, "cannot allocate {:.1f} GiB of device memory for {} synthetic layers",
                 total / 1073741824.0, cfg.n_layers);
  float* fp = m->arena->alloc_n<float>(m->freqs_plain.size());
  float* fy = m->arena->alloc_n<float>(m->freqs_yarn.size());
  cudaMemcpy(fp, m->freqs_plain.data(), m->freqs_plain.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(fy, m->freqs_yarn.data(), m->freqs_yarn.size() * 4, cudaMemcpyHostToDevice);
  m->d_freqs_plain = fp;
  m->d_freqs_yarn = fy;
  SynthAlloc fill(m->arena.get(), seed);
  synth_model(fill, *m);
  DSV4_RETURN_IF_ERROR(fill.status());
  DSV4_RETURN_IF_ERROR(cuda_status(cudaDeviceSynchronize(), "after generating synthetic weights"));
  return m;
}

}  // namespace dsv4::cuda
