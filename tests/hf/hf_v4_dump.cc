// Writes what tests/hf/compare_v4.py needs to check the oracle against Hugging Face transformers'
// DeepSeek-V4 port: the synthetic V4 / 0731 preset's weights dequantized to f32 under their
// checkpoint names (weights.safetensors), the prompt, and the oracle's logits of every prompt row
// in ref32, ref64 and the test-only unquantized mode in both widths (.npy, f32 [T, V]). Links no
// tokenizer.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "backends/cpu/forward.h"
#include "backends/cpu/load.h"
#include "backends/cpu/synthetic.h"
#include "core/safetensors_writer.h"
#include "family/deepseek_v41/preset.h"

namespace {

using namespace dsv4;
using namespace dsv4::cpu;

bool write_npy(const std::string& path, const std::vector<float>& v, int64_t rows, int64_t cols) {
  std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                  std::to_string(cols) + "), }";
  while ((10 + h.size() + 1) % 64 != 0) h += ' ';
  h += '\n';
  std::ofstream f(path, std::ios::binary);
  const uint16_t len = static_cast<uint16_t>(h.size());
  f.write("\x93NUMPY\x01\x00", 8);
  f.write(reinterpret_cast<const char*>(&len), 2);
  f.write(h.data(), static_cast<std::streamsize>(h.size()));
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  return static_cast<bool>(f);
}

class Dump {
 public:
  void f32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    check(w_.add(name, DType::f32, std::move(shape), std::move(b)));
  }
  void i64(const std::string& name, std::vector<int64_t> shape, const std::vector<int32_t>& v) {
    std::vector<int64_t> x(v.begin(), v.end());
    std::vector<uint8_t> b(x.size() * 8);
    std::memcpy(b.data(), x.data(), b.size());
    check(w_.add(name, DType::i64, std::move(shape), std::move(b)));
  }
  void mat(const std::string& name, const Bf16Weight& m) { f32(name, {m.out, m.in}, m.w); }
  void fp8(const std::string& name, const Fp8Weight& m) {
    std::vector<float> v(m.out * m.in);
    for (int64_t n = 0; n < m.out; ++n)
      for (int64_t k = 0; k < m.in; ++k) v[n * m.in + k] = m.at(n, k);
    f32(name, {m.out, m.in}, v);
  }
  void fp4(const std::string& name, const Fp4Weight& m) {
    std::vector<float> v(m.out * m.in);
    for (int64_t n = 0; n < m.out; ++n)
      for (int64_t k = 0; k < m.in; ++k) v[n * m.in + k] = m.w[n * m.in + k] * m.scale[n * (m.in / 32) + k / 32];
    f32(name, {m.out, m.in}, v);
  }
  Status write(const std::string& path) { return w_.write(path); }

 private:
  static void check(const Status& s) {
    if (!s.ok()) { std::fprintf(stderr, "%s\n", s.to_string().c_str()); std::exit(1); }
  }
  SafetensorsWriter w_;
};

void dump_weights(const ModelWeights& W, const std::string& path) {
  const ModelConfig& c = W.config;
  Dump d;
  std::vector<float> emb(W.embed.size());
  for (size_t i = 0; i < emb.size(); ++i) emb[i] = bf16_to_f32(W.embed[i]);
  d.f32("embed.weight", {c.vocab, c.dim}, emb);
  d.mat("head.weight", W.head);
  d.f32("norm.weight", {c.dim}, W.norm);
  d.mat("hc_head_fn", W.hc_head->fn);
  d.f32("hc_head_base", {c.hc_mult}, W.hc_head->base);
  d.f32("hc_head_scale", {1}, {W.hc_head->scale});
  const auto roles = layer_roles(c);
  for (int l = 0; l < c.n_layers; ++l) {
    const BlockWeights& B = W.layers[l];
    const AttentionWeights& A = B.attn;
    const std::string p = "layers." + std::to_string(l) + ".";
    d.fp8(p + "attn.wq_a.weight", A.wq_a);
    d.fp8(p + "attn.wq_b.weight", A.wq_b);
    d.fp8(p + "attn.wkv.weight", A.wkv);
    d.fp8(p + "attn.wo_b.weight", A.wo_b);
    d.mat(p + "attn.wo_a.weight", A.wo_a);
    d.f32(p + "attn.q_norm.weight", {c.q_lora}, A.q_norm);
    d.f32(p + "attn.kv_norm.weight", {c.head_dim}, A.kv_norm);
    d.f32(p + "attn.attn_sink", {c.n_heads}, A.sink);
    if (roles[l].kv_source) {
      d.mat(p + "attn.compressor.wkv.weight", A.comp_wkv);
      d.mat(p + "attn.compressor.wgate.weight", A.comp_wgate);
      d.f32(p + "attn.compressor.ape", {roles[l].ratio, A.comp_wkv.out}, A.comp_ape);
      d.f32(p + "attn.compressor.norm.weight", {c.head_dim}, A.comp_norm);
    }
    if (roles[l].overlap) {
      d.mat(p + "attn.indexer.compressor.wkv.weight", A.idx_comp_wkv);
      d.mat(p + "attn.indexer.compressor.wgate.weight", A.idx_comp_wgate);
      d.f32(p + "attn.indexer.compressor.ape", {roles[l].ratio, A.idx_comp_wkv.out}, A.idx_comp_ape);
      d.f32(p + "attn.indexer.compressor.norm.weight", {c.index_head_dim}, A.idx_comp_norm);
      d.fp8(p + "attn.indexer.wq_b.weight", A.idx_wq_b);
      d.mat(p + "attn.indexer.weights_proj.weight", A.idx_weights_proj);
    }
    const MoeWeights& M = B.ffn;
    d.mat(p + "ffn.gate.weight", M.gate);
    if (!M.tid2eid.empty()) d.i64(p + "ffn.gate.tid2eid", {c.vocab, M.n_active}, M.tid2eid);
    else d.f32(p + "ffn.gate.bias", {M.gate.out}, M.bias);
    for (size_t e = 0; e < M.experts.size(); ++e) {
      const std::string x = p + "ffn.experts." + std::to_string(e) + ".";
      d.fp4(x + "w1.weight", M.experts[e].w1);
      d.fp4(x + "w2.weight", M.experts[e].w2);
      d.fp4(x + "w3.weight", M.experts[e].w3);
    }
    d.fp8(p + "ffn.shared_experts.w1.weight", M.shared.w1);
    d.fp8(p + "ffn.shared_experts.w2.weight", M.shared.w2);
    d.fp8(p + "ffn.shared_experts.w3.weight", M.shared.w3);
    d.f32(p + "attn_norm.weight", {c.dim}, B.attn_norm);
    d.f32(p + "ffn_norm.weight", {c.dim}, B.ffn_norm);
    for (auto [hp, s] : {std::pair{&B.hc_attn, "attn"}, std::pair{&B.hc_ffn, "ffn"}}) {
      d.mat(p + "hc_" + s + "_fn", hp->fn);
      d.f32(p + "hc_" + s + "_base", {static_cast<int64_t>(hp->base.size())}, hp->base);
      d.f32(p + "hc_" + s + "_scale", {3}, hp->scale);
    }
  }
  if (Status s = d.write(path); !s.ok()) { std::fprintf(stderr, "%s\n", s.to_string().c_str()); std::exit(1); }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: hf_v4_dump OUT_DIR [small|tiny] [seed] [tokens]\n");
    return 2;
  }
  const std::string out = argv[1];
  const std::string preset = argc > 2 ? argv[2] : "small";
  const uint64_t seed = argc > 3 ? std::stoull(argv[3]) : 1;
  const int T = argc > 4 ? std::stoi(argv[4]) : 160;
  auto p = family::parse_preset(preset);
  if (!p.ok()) { std::fprintf(stderr, "%s\n", p.status().to_string().c_str()); return 2; }
  const family::Config fc = family::preset_config(*p, family::Variant::v4);
  std::shared_ptr<const ModelWeights> w = synthetic_weights(model_config_from(fc), seed, false);
  const int64_t V = w->config.vocab;
  std::vector<int32_t> prompt(T), rows(T);
  for (int i = 0; i < T; ++i) { prompt[i] = static_cast<int32_t>((i * 7919 + 13) % V); rows[i] = i; }
  std::ofstream(out + "/prompt.txt") << [&] { std::string s; for (int t : prompt) s += std::to_string(t) + " "; return s; }();
  dump_weights(*w, out + "/weights.safetensors");
  struct Mode { const char* name; Precision prec; bool unq; };
  for (Mode m : {Mode{"oracle_ref32", Precision::ref32, false}, Mode{"oracle_ref64", Precision::ref64, false},
                 Mode{"oracle_unquantized", Precision::ref32, true},
                 Mode{"oracle_unquantized_ref64", Precision::ref64, true}}) {
    OracleOptions o;
    o.precision = m.prec;
    o.unquantized = m.unq;
    auto oracle = Oracle::create(w, o);
    if (!oracle.ok()) { std::fprintf(stderr, "%s\n", oracle.status().to_string().c_str()); return 1; }
    auto r = (*oracle)->forward({Piece{(*oracle)->open_stream(), prompt, rows}});
    if (!r.ok()) { std::fprintf(stderr, "%s\n", r.status().to_string().c_str()); return 1; }
    write_npy(out + "/" + m.name + ".npy", (*r)[0].logits, T, V);
    std::printf("wrote %s/%s.npy [%d, %lld]\n", out.c_str(), m.name, T, static_cast<long long>(V));
  }
  return 0;
}
