// Test helper: every field of two ModelWeights compared bit for bit (floats by their bits, so -0 and
// +0 differ), the differences listed by tensor name.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/weights.h"

namespace dsv4::cpu::weights_testing {

struct CompareOptions {
  bool dspark = true;              // compare the drafters (false: either may lack one)
  bool engram_multipliers = true;  // compare the Engram hash multipliers
};

class Differ {
 public:
  explicit Differ(CompareOptions o) : o_(o) {}

  template <typename T>
  void vec(const std::string& n, const std::vector<T>& a, const std::vector<T>& b) {
    if (a.size() != b.size() || (!a.empty() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) != 0))
      diffs.push_back(n);
  }
  void exl3(const std::string& n, const Exl3Weight* a, const Exl3Weight* b) {
    if (!a && !b) return;
    if (!a || !b || a->parts.size() != b->parts.size() || a->in != b->in || a->out != b->out)
      return diffs.push_back(n + " (EXL3)");
    for (size_t i = 0; i < a->parts.size(); ++i) {
      const exl3::Linear &x = a->parts[i].packed, &y = b->parts[i].packed;
      if (x.bits != y.bits || x.codebook != y.codebook || x.trellis != y.trellis || x.suh != y.suh || x.svh != y.svh)
        diffs.push_back(n + " (EXL3 part " + std::to_string(i) + ")");
      vec(n + " (EXL3 Wq part " + std::to_string(i) + ")", a->parts[i].wq_t, b->parts[i].wq_t);
    }
  }
  template <typename W>
  void dims(const std::string& n, const W& a, const W& b) {
    if (a.out != b.out || a.in != b.in) diffs.push_back(n + " (shape)");
    exl3(n, a.exl3.get(), b.exl3.get());
  }
  void lin(const std::string& n, const Fp8Weight& a, const Fp8Weight& b) {
    dims(n, a, b);
    if (a.block != b.block) diffs.push_back(n + " (block)");
    vec(n + ".weight", a.w, b.w);
    vec(n + ".scale", a.scale, b.scale);
  }
  void lin(const std::string& n, const Fp4Weight& a, const Fp4Weight& b) {
    dims(n, a, b);
    vec(n + ".weight", a.w, b.w);
    vec(n + ".scale", a.scale, b.scale);
  }
  void lin(const std::string& n, const Bf16Weight& a, const Bf16Weight& b) {
    dims(n, a, b);
    vec(n, a.w, b.w);
  }
  void hc(const std::string& n, const HcParams& a, const HcParams& b) {
    lin(n + "_fn", a.fn, b.fn);
    vec(n + "_base", a.base, b.base);
    vec(n + "_scale", a.scale, b.scale);
  }
  void block(const std::string& p, const BlockWeights& a, const BlockWeights& b) {
    const AttentionWeights &x = a.attn, &y = b.attn;
    lin(p + "attn.wq_a", x.wq_a, y.wq_a);
    lin(p + "attn.wq_b", x.wq_b, y.wq_b);
    lin(p + "attn.wkv", x.wkv, y.wkv);
    lin(p + "attn.wo_b", x.wo_b, y.wo_b);
    lin(p + "attn.wo_a", x.wo_a, y.wo_a);
    vec(p + "attn.q_norm", x.q_norm, y.q_norm);
    vec(p + "attn.kv_norm", x.kv_norm, y.kv_norm);
    vec(p + "attn.attn_sink", x.sink, y.sink);
    lin(p + "attn.compressor.wkv", x.comp_wkv, y.comp_wkv);
    lin(p + "attn.compressor.wgate", x.comp_wgate, y.comp_wgate);
    vec(p + "attn.compressor.norm", x.comp_norm, y.comp_norm);
    vec(p + "attn.compressor.ape", x.comp_ape, y.comp_ape);
    lin(p + "attn.indexer.wk", x.idx_wk, y.idx_wk);
    vec(p + "attn.indexer.k_norm", x.idx_k_norm, y.idx_k_norm);
    lin(p + "attn.indexer.wq_b", x.idx_wq_b, y.idx_wq_b);
    lin(p + "attn.indexer.weights_proj", x.idx_weights_proj, y.idx_weights_proj);
    lin(p + "attn.indexer.compressor.wkv", x.idx_comp_wkv, y.idx_comp_wkv);
    lin(p + "attn.indexer.compressor.wgate", x.idx_comp_wgate, y.idx_comp_wgate);
    vec(p + "attn.indexer.compressor.ape", x.idx_comp_ape, y.idx_comp_ape);
    vec(p + "attn.indexer.compressor.norm", x.idx_comp_norm, y.idx_comp_norm);
    const MoeWeights &m = a.ffn, &n = b.ffn;
    lin(p + "ffn.gate", m.gate, n.gate);
    vec(p + "ffn.gate.bias", m.bias, n.bias);
    vec(p + "ffn.gate.bias_vl", m.bias_vl, n.bias_vl);
    vec(p + "ffn.gate.tid2eid", m.tid2eid, n.tid2eid);
    if (m.n_active != n.n_active) diffs.push_back(p + "ffn (n_active)");
    if (m.experts.size() != n.experts.size()) diffs.push_back(p + "ffn.experts (count)");
    for (size_t e = 0; e < m.experts.size() && e < n.experts.size(); ++e) {
      const std::string q = p + "ffn.experts." + std::to_string(e) + ".";
      lin(q + "w1", m.experts[e].w1, n.experts[e].w1);
      lin(q + "w2", m.experts[e].w2, n.experts[e].w2);
      lin(q + "w3", m.experts[e].w3, n.experts[e].w3);
    }
    lin(p + "ffn.shared_experts.w1", m.shared.w1, n.shared.w1);
    lin(p + "ffn.shared_experts.w2", m.shared.w2, n.shared.w2);
    lin(p + "ffn.shared_experts.w3", m.shared.w3, n.shared.w3);
    vec(p + "attn_norm", a.attn_norm, b.attn_norm);
    vec(p + "ffn_norm", a.ffn_norm, b.ffn_norm);
    hc(p + "hc_attn", a.hc_attn, b.hc_attn);
    hc(p + "hc_ffn", a.hc_ffn, b.hc_ffn);
    if (!a.engram != !b.engram) return diffs.push_back(p + "engram (presence)");
    if (!a.engram) return;
    const EngramWeights &E = *a.engram, &F = *b.engram;
    if (E.layout.max_ngram != F.layout.max_ngram || E.layout.heads != F.layout.heads)
      diffs.push_back(p + "engram (layout)");
    vec(p + "engram (primes)", E.layout.primes, F.layout.primes);
    vec(p + "engram (offsets)", E.layout.offsets, F.layout.offsets);
    if (o_.engram_multipliers) vec(p + "engram (multipliers)", E.layout.multipliers, F.layout.multipliers);
    if (E.table.rows != F.table.rows || E.table.dim != F.table.dim) diffs.push_back(p + "engram.embed (shape)");
    vec(p + "engram.embed.weight", E.table.codes, F.table.codes);
    vec(p + "engram.embed.scale", E.table.scales, F.table.scales);
    lin(p + "engram.wkv", E.wkv, F.wkv);
    vec(p + "engram.q_weight", E.q_weight, F.q_weight);
    vec(p + "engram.k_weight", E.k_weight, F.k_weight);
  }
  void model(const ModelWeights& a, const ModelWeights& b) {
    vec("embed", a.embed, b.embed);
    if (a.layers.size() != b.layers.size()) return diffs.push_back("layers (count)");
    for (size_t l = 0; l < a.layers.size(); ++l) block("layers." + std::to_string(l) + ".", a.layers[l], b.layers[l]);
    vec("norm", a.norm, b.norm);
    lin("head", a.head, b.head);
    vec("engram_token_map", a.engram_token_map, b.engram_token_map);
    if (!a.hc_head != !b.hc_head) diffs.push_back("hc_head (presence)");
    if (a.hc_head && b.hc_head) {
      lin("hc_head_fn", a.hc_head->fn, b.hc_head->fn);
      vec("hc_head_base", a.hc_head->base, b.hc_head->base);
      vec("hc_head_scale", std::vector<float>{a.hc_head->scale}, std::vector<float>{b.hc_head->scale});
    }
    if (!o_.dspark) return;
    if (!a.dspark != !b.dspark) return diffs.push_back("mtp (presence)");
    if (!a.dspark) return;
    const DsparkWeights &S = *a.dspark, &T = *b.dspark;
    if (S.stages.size() != T.stages.size()) return diffs.push_back("mtp (stages)");
    for (size_t s = 0; s < S.stages.size(); ++s) block("mtp." + std::to_string(s) + ".", S.stages[s], T.stages[s]);
    lin("mtp.0.main_proj", S.main_proj, T.main_proj);
    vec("mtp.0.main_norm", S.main_norm, T.main_norm);
    vec("mtp.norm", S.norm, T.norm);
    vec("mtp.markov_head.embed", S.markov_embed, T.markov_embed);
    lin("mtp.markov_head.head", S.markov_head, T.markov_head);
    lin("mtp.confidence_head.proj", S.confidence, T.confidence);
  }

  std::vector<std::string> diffs;

 private:
  CompareOptions o_;
};

// The names of every field that differs (empty: the same bit for bit).
inline std::vector<std::string> differences(const ModelWeights& a, const ModelWeights& b, CompareOptions o = {}) {
  Differ d(o);
  d.model(a, b);
  return d.diffs;
}

}  // namespace dsv4::cpu::weights_testing
