// Seeded random weights in checkpoint formats (see synthetic.h).
#include "backends/cpu/synthetic.h"

#include <cmath>

namespace dsv4::cpu {

namespace {

struct Rng {  // SplitMix64
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  double sym() { return 2 * uniform() - 1; }                                 // [-1, 1)
};

// Power-of-two scale byte for values of typical magnitude `sigma` coded over +-`max_code`.
uint8_t scale_byte(double sigma, double max_code, Rng& g) {
  const int e = static_cast<int>(std::floor(std::log2(sigma * 2.0 / max_code))) + static_cast<int>(g.next() % 2);
  return static_cast<uint8_t>(127 + e);
}

Fp8Weight fp8(Rng& g, int64_t out, int64_t in, int block, double sigma) {
  Fp8Weight w;
  w.out = out; w.in = in; w.block = block;
  w.w.resize(out * in);
  for (auto& v : w.w) v = e4m3_to_f32(f32_to_e4m3(static_cast<float>(g.sym() * 448.0)));
  const int64_t sb = ((out + block - 1) / block) * ((in + block - 1) / block);
  for (int64_t i = 0; i < sb; ++i) w.scale.push_back(ue8m0_to_f32(scale_byte(sigma, 448.0, g)));
  return w;
}

Fp4Weight fp4(Rng& g, int64_t out, int64_t in, double sigma) {
  Fp4Weight w;
  w.out = out; w.in = in;
  w.w.resize(out * in);
  for (auto& v : w.w) v = e2m1_to_f32(static_cast<uint8_t>(g.next() % 16));
  for (int64_t i = 0; i < out * in / 32; ++i) w.scale.push_back(ue8m0_to_f32(scale_byte(sigma, 6.0, g)));
  return w;
}

Bf16Weight bf16w(Rng& g, int64_t out, int64_t in, double sigma) {
  Bf16Weight w;
  w.out = out; w.in = in;
  w.w.resize(out * in);
  for (auto& v : w.w) v = round_bf16(static_cast<float>(g.sym() * sigma * std::sqrt(3.0)));
  return w;
}

std::vector<float> vec(Rng& g, int64_t n, double center, double spread, bool bf16) {
  std::vector<float> v(n);
  for (auto& x : v) {
    x = static_cast<float>(center + spread * g.sym());
    if (bf16) x = round_bf16(x);
  }
  return v;
}

// The numbers that differ between the profiles (synthetic.h). Draw order is the same in both.
struct Shape {
  double attn_out;     // gain of what a sub-layer writes into the streams: wo_b,
  double ffn_out;      // the experts' and the shared expert's w2,
  double engram_out;   // the Engram wkv
  double hc_fn;        // hc fn sigma * sqrt(C*D): how much the mixes depend on the stream
  double hc_base;      // spread of the hc base around its mean
  bool hc_near_identity;  // base means: pre, post sigmoid(-1.1), comb logits 3 on the diagonal
  double hc_scale, hc_scale_spread;
  double norm_spread;  // RMSNorm / q / kv norm weights 1 +- this
  double head_peak;    // logit (in units of the random part's spread) of each token's successor
};

constexpr Shape kRandom{1.0, 1.0, 1.0, 0.5, 0.5, false, 1.0, 0.3, 0.2, 0.0};
constexpr Shape kGate{1.0 / 32, 1.0 / 128, 1.0 / 32, 0.5, 0.1, true, 0.2, 0.02, 0.05, 8.0};

const Shape& shape_of(WeightProfile p) { return p == WeightProfile::gate ? kGate : kRandom; }

HcParams hc(Rng& g, const ModelConfig& c, const Shape& sh) {
  HcParams p;
  const int C = c.hc_mult;
  p.fn = bf16w(g, c.hc_mixes(), C * c.dim, sh.hc_fn / std::sqrt(static_cast<double>(C * c.dim)));
  p.base = vec(g, c.hc_mixes(), 0.0, sh.hc_base, false);
  if (sh.hc_near_identity)  // layout [pre C, post C, comb C x C]
    for (int i = 0; i < c.hc_mixes(); ++i)
      p.base[i] += i < 2 * C ? -1.1f : ((i - 2 * C) / C == (i - 2 * C) % C ? 3.0f : 0.0f);
  p.scale = vec(g, 3, sh.hc_scale, sh.hc_scale_spread, false);
  return p;
}

BlockWeights block(Rng& g, const ModelConfig& c, const LayerRole& role, int n_experts, int n_active,
                   const Shape& sh) {
  BlockWeights b;
  const int64_t D = c.dim, d = c.head_dim, H = c.n_heads, Q = c.q_lora, G = c.o_groups, O = c.o_lora;
  const int wb = c.weight_block;
  auto isq = [](int64_t n) { return 1.0 / std::sqrt(static_cast<double>(n)); };
  AttentionWeights& a = b.attn;
  a.wq_a = fp8(g, Q, D, wb, isq(D));
  a.wq_b = fp8(g, H * d, Q, wb, isq(Q));
  a.wkv = fp8(g, d, D, wb, isq(D));
  a.wo_b = fp8(g, D, G * O, wb, sh.attn_out * isq(G * O));
  Fp8Weight woa = fp8(g, G * O, H * d / G, wb, isq(H * d / G));
  a.wo_a.out = woa.out; a.wo_a.in = woa.in;
  for (int64_t n = 0; n < woa.out; ++n)
    for (int64_t k = 0; k < woa.in; ++k) a.wo_a.w.push_back(woa.at(n, k));
  a.q_norm = vec(g, Q, 1.0, sh.norm_spread, true);
  a.kv_norm = vec(g, d, 1.0, sh.norm_spread, true);
  a.sink = vec(g, H, 0.0, 1.0, false);
  if (role.kv_source && c.v4()) {
    // V4: every compressor gated and fp32, with its position bias; ratio 4 overlapped (2x wide)
    // with its own indexer compressor.
    const int64_t w = role.overlap ? 2 * d : d, ihd = c.index_head_dim;
    a.comp_wkv = bf16w(g, w, D, isq(D));
    a.comp_wgate = bf16w(g, w, D, isq(D));
    a.comp_ape = vec(g, role.ratio * w, 0.0, 0.5, false);
    a.comp_norm = vec(g, d, 1.0, 0.2, true);
    if (role.overlap) {
      a.idx_comp_wkv = bf16w(g, 2 * ihd, D, isq(D));
      a.idx_comp_wgate = bf16w(g, 2 * ihd, D, isq(D));
      a.idx_comp_ape = vec(g, role.ratio * 2 * ihd, 0.0, 0.5, false);
      a.idx_comp_norm = vec(g, ihd, 1.0, 0.2, true);
    }
  } else if (role.kv_source) {
    a.comp_wkv = bf16w(g, d, D, isq(D));
    if (role.ratio > 1) a.comp_wgate = bf16w(g, d, D, isq(D));
    a.comp_norm = vec(g, d, 1.0, 0.2, true);
    a.idx_wk = bf16w(g, c.index_head_dim, d, isq(d));
    a.idx_k_norm = vec(g, c.index_head_dim, 1.0, 0.2, true);
  }
  if (role.index_source) {
    a.idx_wq_b = fp8(g, static_cast<int64_t>(c.index_heads) * c.index_head_dim, Q, wb, isq(Q));
    a.idx_weights_proj = bf16w(g, c.index_heads, D, isq(D));
  }
  MoeWeights& m = b.ffn;
  m.gate = bf16w(g, n_experts, D, isq(D));
  m.n_active = n_active;
  if (role.hash_routed) {  // n_active distinct experts per token (partial Fisher-Yates)
    std::vector<int32_t> perm(n_experts);
    for (int64_t t = 0; t < c.vocab; ++t) {
      for (int e = 0; e < n_experts; ++e) perm[e] = e;
      for (int j = 0; j < n_active; ++j) std::swap(perm[j], perm[j + g.next() % (n_experts - j)]);
      m.tid2eid.insert(m.tid2eid.end(), perm.begin(), perm.begin() + n_active);
    }
  } else {
    m.bias = vec(g, n_experts, 0.0, 0.1, false);
    if (!c.v4()) m.bias_vl = vec(g, n_experts, 0.0, 0.1, false);
  }
  for (int e = 0; e < n_experts; ++e)
    m.experts.push_back({fp4(g, c.moe_inter, D, isq(D)), fp4(g, D, c.moe_inter, sh.ffn_out * isq(c.moe_inter)),
                         fp4(g, c.moe_inter, D, isq(D))});
  m.shared = {fp8(g, c.moe_inter, D, wb, isq(D)), fp8(g, D, c.moe_inter, wb, sh.ffn_out * isq(c.moe_inter)),
              fp8(g, c.moe_inter, D, wb, isq(D))};
  b.attn_norm = vec(g, D, 1.0, sh.norm_spread, true);
  b.ffn_norm = vec(g, D, 1.0, sh.norm_spread, true);
  b.hc_attn = hc(g, c, sh);
  b.hc_ffn = hc(g, c, sh);
  return b;
}

// Head rows with a margin: the row of successor(t) = (t * 7919 + 1) mod V gains peak * sqrt(3) / D
// times embedding row t (uniform in [-1, 1): RMS 1/sqrt(3)). A stream that still carries token t's
// embedding then scores successor(t) about `peak` above the head's random part (spread ~1), whose
// largest value over V = 129,280 tokens is about 4.8; -> bf16.
void add_successor_rows(ModelWeights& w, double peak) {
  const int64_t V = w.config.vocab, D = w.config.dim;
  const double k = peak * std::sqrt(3.0) / static_cast<double>(D);
  for (int64_t t = 0; t < V; ++t) {
    float* row = &w.head.w[((t * 7919 + 1) % V) * D];
    for (int64_t i = 0; i < D; ++i) row[i] = round_bf16(static_cast<float>(row[i] + k * bf16_to_f32(w.embed[t * D + i])));
  }
}

}  // namespace

ModelConfig small_test_config() {
  ModelConfig c;
  c.vocab = 512; c.dim = 128; c.n_layers = 8;
  c.n_heads = 4; c.head_dim = 64; c.rope_dim = 16;
  c.q_lora = 64; c.o_lora = 32; c.o_groups = 2;
  c.window = 8;
  c.n_experts = 8; c.n_active = 2; c.moe_inter = 64;
  c.compress_ratios = {0, 0, 2, 2, 1, 1, 1, 1};
  c.kv_source_layers = {2, 4};
  c.index_source_layers = {2, 4, 6};
  c.candidate_source_layer = 4;
  c.candidate_topk_blocks = 3; c.candidate_block_size = 2;
  c.index_heads = 4; c.index_head_dim = 32; c.index_topk = 4;
  c.engram_layers = {1, 3};
  c.engram_max_ngram = 4; c.engram_heads = 2; c.engram_head_dim = 32;
  c.engram_vocab_size = 50; c.engram_compressed_vocab = 300;
  c.dspark_stages = 3; c.dspark_block = 5; c.dspark_noise_token = 500;
  c.dspark_target_layers = {5, 6, 7};
  c.dspark_markov_rank = 32; c.dspark_experts = 4; c.dspark_active = 2;
  return c;
}

ModelConfig small_v4_test_config() {
  ModelConfig c;
  c.vocab = 512; c.dim = 128; c.n_layers = 6;
  c.n_heads = 4; c.head_dim = 128; c.rope_dim = 64;
  c.q_lora = 128; c.o_lora = 64; c.o_groups = 2;
  c.window = 8;
  c.norm_eps = 1e-6f;
  c.weight_block = 128; c.act_block = 128;
  c.n_experts = 8; c.n_active = 2; c.moe_inter = 128;
  c.num_hash_layers = 2;
  c.compress_ratios = {0, 4, 128, 4, 128, 4};
  c.index_heads = 4; c.index_head_dim = 64; c.index_topk = 4;
  c.dspark_stages = 0;
  apply_v4_numerics(c);
  return c;
}

std::shared_ptr<ModelWeights> synthetic_weights(const ModelConfig& c, uint64_t seed, bool with_dspark,
                                                WeightProfile profile) {
  const Shape& sh = shape_of(profile);
  Rng g{seed};
  auto w = std::make_shared<ModelWeights>();
  w->config = c;
  const int64_t D = c.dim, V = c.vocab;
  const auto roles = layer_roles(c);
  w->embed.resize(V * D);
  for (auto& e : w->embed) e = to_bf16(static_cast<float>(g.sym()));
  for (int l = 0; l < c.n_layers; ++l) w->layers.push_back(block(g, c, roles[l], c.n_experts, c.n_active, sh));
  // Engram: primes from the layout rule, odd multipliers, a random token map.
  if (!c.engram_layers.empty()) {
    const auto primes = engram_primes(c.engram_vocab_size, static_cast<int>(c.engram_layers.size()),
                                      c.engram_max_ngram, c.engram_heads);
    w->engram_token_map.resize(V);
    for (auto& t : w->engram_token_map) t = static_cast<int32_t>(g.next() % c.engram_compressed_vocab);
    for (size_t e = 0; e < c.engram_layers.size(); ++e) {
      auto E = std::make_unique<EngramWeights>();
      E->layout.max_ngram = c.engram_max_ngram;
      E->layout.heads = c.engram_heads;
      E->layout.primes = primes[e];
      int64_t off = 0;
      for (int64_t p : primes[e]) { E->layout.offsets.push_back(off); off += p; }
      for (int s = 0; s < c.engram_max_ngram; ++s)
        E->layout.multipliers.push_back(static_cast<int64_t>((g.next() >> 20) | 1));
      E->table.rows = off;
      E->table.dim = c.engram_head_dim;
      E->table.codes.resize(off * c.engram_head_dim);
      for (auto& b : E->table.codes) { b = static_cast<uint8_t>(g.next()); if ((b & 0x7f) == 0x7f) b = 0; }
      E->table.scales.resize(off * (c.engram_head_dim / 32));
      for (auto& b : E->table.scales) b = static_cast<uint8_t>(120 + g.next() % 4);
      const int64_t R = static_cast<int64_t>(primes[e].size()) * c.engram_head_dim;
      E->wkv = fp8(g, (c.hc_mult + 1) * D, R, c.weight_block, sh.engram_out / std::sqrt(static_cast<double>(R)));
      E->q_weight = vec(g, c.hc_mult * D, 1.0, 0.3, true);
      E->k_weight = vec(g, c.hc_mult * D, 1.0, 0.3, true);
      w->layers[c.engram_layers[e]].engram = std::move(E);
    }
  }
  w->norm = vec(g, D, 1.0, sh.norm_spread, true);
  w->head = bf16w(g, V, D, 1.0 / std::sqrt(static_cast<double>(D)));
  if (sh.head_peak > 0) add_successor_rows(*w, sh.head_peak);
  if (c.v4()) {
    auto hh = std::make_unique<HcHeadWeights>();
    hh->fn = bf16w(g, c.hc_mult, c.hc_mult * D, sh.hc_fn / std::sqrt(static_cast<double>(c.hc_mult * D)));
    hh->base = vec(g, c.hc_mult, 0.0, sh.hc_base, false);
    hh->scale = static_cast<float>(sh.hc_scale + sh.hc_scale_spread * g.sym());
    w->hc_head = std::move(hh);
  }
  if (with_dspark) {
    auto S = std::make_unique<DsparkWeights>();
    LayerRole plain;
    for (int s = 0; s < c.dspark_stages; ++s)
      S->stages.push_back(block(g, c, plain, c.dspark_experts, c.dspark_active, sh));
    const int64_t taps = static_cast<int64_t>(c.dspark_target_layers.size()) * D;
    S->main_proj = fp8(g, D, taps, c.weight_block, 1.0 / std::sqrt(static_cast<double>(taps)));
    S->main_norm = vec(g, D, 1.0, 0.2, true);
    S->norm = vec(g, D, 1.0, 0.2, true);
    const int64_t R = c.dspark_markov_rank;
    S->markov_embed.resize(V * R);
    for (auto& e : S->markov_embed) e = to_bf16(static_cast<float>(g.sym()));
    S->markov_head = bf16w(g, V, R, 1.0 / std::sqrt(static_cast<double>(R)));
    S->confidence = bf16w(g, 1, D + R, 1.0 / std::sqrt(static_cast<double>(D + R)));
    w->dspark = std::move(S);
  }
  return w;
}

}  // namespace dsv4::cpu
