// Seeded random weights in checkpoint formats (see synthetic.h).
#include "family/deepseek_v41/synthetic_weights.h"

#include <cmath>
#include <cstring>

#include "core/exact_encode.h"
#include "core/bf16.h"
#include "core/fp4.h"
#include "core/fp8.h"
#include "family/deepseek_v41/tensors.h"

namespace dsv4::family {

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

double isq(int64_t n) { return 1.0 / std::sqrt(static_cast<double>(n)); }

// Draws values in the generator's fixed order and stores each tensor under its release name in the dtype the
// release table gives it; a value its dtype cannot hold exactly, or a name or shape the table does not have,
// is a programming error (DSV4_CHECK).
class Emitter {
 public:
  Emitter(const Config& c, Rng& g, MemoryTensors& out)
      : c_(c), g_(g), out_(out), table_(expected_tensors(c)) {}

  Rng& rng() { return g_; }

  // FP8 e4m3 [out, in] codes of random values in +-448, then one random pow2 scale per block x block tile.
  void fp8(const std::string& name, int64_t out, int64_t in, double sigma) {
    const int64_t block = c_.quant.weight_block_in;
    std::vector<uint8_t> codes(static_cast<size_t>(out * in));
    for (auto& v : codes) v = f32_to_e4m3(e4m3_to_f32(f32_to_e4m3(static_cast<float>(g_.sym() * 448.0))));
    const int64_t sb = ((out + block - 1) / block) * ((in + block - 1) / block);
    std::vector<uint8_t> scales(static_cast<size_t>(sb));
    for (auto& s : scales) s = scale_byte(sigma, 448.0, g_);
    put(name + ".weight", std::move(codes));
    put(name + ".scale", std::move(scales));
  }
  // FP4 e2m1 [out, in] random codes (packed two per byte), one pow2 scale per 32 along K.
  void fp4(const std::string& name, int64_t out, int64_t in, double sigma) {
    std::vector<uint8_t> codes(static_cast<size_t>(out * in));
    for (auto& v : codes) v = static_cast<uint8_t>(g_.next() % 16);
    std::vector<uint8_t> packed(codes.size() / 2);
    for (size_t i = 0; i < packed.size(); ++i) packed[i] = pack_e2m1_pair(codes[2 * i], codes[2 * i + 1]);
    std::vector<uint8_t> scales(static_cast<size_t>(out * in / 32));
    for (auto& s : scales) s = scale_byte(sigma, 6.0, g_);
    put(name + ".weight", std::move(packed));
    put(name + ".scale", std::move(scales));
  }
  // bf16 values uniform with standard deviation sigma [out, in].
  std::vector<float> bf16w(int64_t out, int64_t in, double sigma) {
    std::vector<float> w(static_cast<size_t>(out * in));
    for (auto& v : w) v = round_bf16(static_cast<float>(g_.sym() * sigma * std::sqrt(3.0)));
    return w;
  }
  std::vector<float> vec(int64_t n, double center, double spread, bool bf16) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) {
      x = static_cast<float>(center + spread * g_.sym());
      if (bf16) x = round_bf16(x);
    }
    return v;
  }
  void matrix(const std::string& name, int64_t out, int64_t in, double sigma) { floats(name, bf16w(out, in, sigma)); }
  void floats(const std::string& name, const std::vector<float>& v) {
    const TensorSpec* s = spec(name);
    auto b = encode_floats(v, s->dtype);
    DSV4_CHECK(b.ok());
    put(name, std::move(*b));
  }
  void raw(const std::string& name, std::vector<uint8_t> bytes) { put(name, std::move(bytes)); }

 private:
  const TensorSpec* spec(const std::string& name) const {
    const TensorSpec* s = table_.find(name);
    DSV4_CHECK(s != nullptr);
    return s;
  }
  void put(const std::string& name, std::vector<uint8_t> bytes) {
    const TensorSpec* s = spec(name);
    DSV4_CHECK(out_.add(name, s->dtype, s->shape, std::move(bytes)).ok());
  }

  const Config& c_;
  Rng& g_;
  MemoryTensors& out_;
  TensorTable table_;
};

void hc(Emitter& e, const Config& c, const std::string& name, const Shape& sh) {
  const int C = c.hc_mult, mixes = C * (C + 2);
  e.matrix(name + "_fn", mixes, C * c.hidden_size, sh.hc_fn / std::sqrt(static_cast<double>(C * c.hidden_size)));
  std::vector<float> base = e.vec(mixes, 0.0, sh.hc_base, false);
  if (sh.hc_near_identity)  // layout [pre C, post C, comb C x C]
    for (int i = 0; i < mixes; ++i) base[i] += i < 2 * C ? -1.1f : ((i - 2 * C) / C == (i - 2 * C) % C ? 3.0f : 0.0f);
  e.floats(name + "_base", base);
  e.floats(name + "_scale", e.vec(3, sh.hc_scale, sh.hc_scale_spread, false));
}

void block(Emitter& e, const Config& c, const LayerPlan& p, const Shape& sh) {
  const std::string n = p.name() + ".";
  const int64_t D = c.hidden_size, d = c.head_dim, H = c.num_attention_heads, Q = c.q_lora_rank, G = c.o_groups,
                O = c.o_lora_rank, I = c.moe_intermediate_size, ihd = c.index_head_dim;
  const bool v4 = c.variant == Variant::v4;
  e.fp8(n + "attn.wq_a", Q, D, isq(D));
  e.fp8(n + "attn.wq_b", H * d, Q, isq(Q));
  e.fp8(n + "attn.wkv", d, D, isq(D));
  e.fp8(n + "attn.wo_b", D, G * O, sh.attn_out * isq(G * O));
  e.fp8(n + "attn.wo_a", G * O, H * d / G, isq(H * d / G));
  e.floats(n + "attn.q_norm.weight", e.vec(Q, 1.0, sh.norm_spread, true));
  e.floats(n + "attn.kv_norm.weight", e.vec(d, 1.0, sh.norm_spread, true));
  e.floats(n + "attn.attn_sink", e.vec(H, 0.0, 1.0, false));
  if (p.kv_source && v4) {
    // V4: every compressor gated and fp32, with its position bias; ratio 4 overlapped (2x wide) with its
    // own indexer compressor.
    const int64_t w = p.compressor_overlap ? 2 * d : d;
    e.matrix(n + "attn.compressor.wkv.weight", w, D, isq(D));
    e.matrix(n + "attn.compressor.wgate.weight", w, D, isq(D));
    e.floats(n + "attn.compressor.ape", e.vec(p.compress_ratio * w, 0.0, 0.5, false));
    e.floats(n + "attn.compressor.norm.weight", e.vec(d, 1.0, 0.2, true));
    if (p.compressor_overlap) {
      e.matrix(n + "attn.indexer.compressor.wkv.weight", 2 * ihd, D, isq(D));
      e.matrix(n + "attn.indexer.compressor.wgate.weight", 2 * ihd, D, isq(D));
      e.floats(n + "attn.indexer.compressor.ape", e.vec(p.compress_ratio * 2 * ihd, 0.0, 0.5, false));
      e.floats(n + "attn.indexer.compressor.norm.weight", e.vec(ihd, 1.0, 0.2, true));
    }
  } else if (p.kv_source) {
    e.matrix(n + "attn.compressor.wkv.weight", d, D, isq(D));
    if (p.compressor_gate) e.matrix(n + "attn.compressor.wgate.weight", d, D, isq(D));
    e.floats(n + "attn.compressor.norm.weight", e.vec(d, 1.0, 0.2, true));
    e.matrix(n + "attn.indexer.wk.weight", ihd, d, isq(d));
    e.floats(n + "attn.indexer.k_norm.weight", e.vec(ihd, 1.0, 0.2, true));
  }
  if (p.index_source) {
    e.fp8(n + "attn.indexer.wq_b", static_cast<int64_t>(c.index_n_heads) * ihd, Q, isq(Q));
    e.matrix(n + "attn.indexer.weights_proj.weight", c.index_n_heads, D, isq(D));
  }
  const int64_t E = p.n_routed_experts;
  const int K = p.num_experts_per_tok;
  e.matrix(n + "ffn.gate.weight", E, D, isq(D));
  if (p.hash_routed) {  // K distinct experts per token (partial Fisher-Yates)
    std::vector<int32_t> perm(static_cast<size_t>(E));
    std::vector<uint8_t> ids(static_cast<size_t>(c.vocab_size * K * 8));
    for (int64_t t = 0; t < c.vocab_size; ++t) {
      for (int64_t x = 0; x < E; ++x) perm[x] = static_cast<int32_t>(x);
      for (int j = 0; j < K; ++j) std::swap(perm[j], perm[j + e.rng().next() % (E - j)]);
      for (int j = 0; j < K; ++j) {
        const int64_t id = perm[j];
        std::memcpy(&ids[8 * (t * K + j)], &id, 8);
      }
    }
    e.raw(n + "ffn.gate.tid2eid", std::move(ids));
  } else {
    e.floats(n + "ffn.gate.bias", e.vec(E, 0.0, 0.1, false));
    if (!v4) e.floats(n + "ffn.gate.bias_vl", e.vec(E, 0.0, 0.1, false));
  }
  for (int64_t x = 0; x < E; ++x) {
    const std::string q = n + "ffn.experts." + std::to_string(x) + ".";
    e.fp4(q + "w1", I, D, isq(D));
    e.fp4(q + "w2", D, I, sh.ffn_out * isq(I));
    e.fp4(q + "w3", I, D, isq(D));
  }
  e.fp8(n + "ffn.shared_experts.w1", I, D, isq(D));
  e.fp8(n + "ffn.shared_experts.w2", D, I, sh.ffn_out * isq(I));
  e.fp8(n + "ffn.shared_experts.w3", I, D, isq(D));
  e.floats(n + "attn_norm.weight", e.vec(D, 1.0, sh.norm_spread, true));
  e.floats(n + "ffn_norm.weight", e.vec(D, 1.0, sh.norm_spread, true));
  hc(e, c, n + "hc_attn", sh);
  hc(e, c, n + "hc_ffn", sh);
}

// Head rows with a margin: the row of successor(t) = (t * 7919 + 1) mod V gains peak * sqrt(3) / D
// times embedding row t (uniform in [-1, 1): RMS 1/sqrt(3)). A stream that still carries token t's
// embedding then scores successor(t) about `peak` above the head's random part (spread ~1), whose
// largest value over V = 129,280 tokens is about 4.8; -> bf16.
void add_successor_rows(std::vector<float>& head, const std::vector<uint16_t>& embed, int64_t V, int64_t D,
                        double peak) {
  const double k = peak * std::sqrt(3.0) / static_cast<double>(D);
  for (int64_t t = 0; t < V; ++t) {
    float* row = &head[((t * 7919 + 1) % V) * D];
    for (int64_t i = 0; i < D; ++i) row[i] = round_bf16(static_cast<float>(row[i] + k * bf16_to_f32(embed[t * D + i])));
  }
}

std::vector<uint8_t> bytes_of(const std::vector<uint16_t>& v) {
  std::vector<uint8_t> b(v.size() * 2);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// The config the weights are drawn for: no vision tower (the oracle's forward reads text only) and the
// DSpark stages only when asked for on V4.1 (the 0731 drafter is not run, model-spec.md §10.7).
Config synthetic_config(Config c, bool with_dspark) {
  c.vision.reset();
  if (!with_dspark || c.variant == Variant::v4) c = without_dspark(c);
  return c;
}

}  // namespace

std::shared_ptr<const Model> synthetic_weights(const Config& config, uint64_t seed, bool with_dspark,
                                                       WeightProfile profile) {
  const Config c = synthetic_config(config, with_dspark);
  const ModelPlan plan = build_plan(c);
  const Shape& sh = shape_of(profile);
  Rng g{seed};
  auto store = std::make_shared<MemoryTensors>("synthetic weights");
  Emitter e(c, g, *store);
  const int64_t D = c.hidden_size, V = c.vocab_size;
  std::vector<uint16_t> embed(static_cast<size_t>(V * D));
  for (auto& x : embed) x = f32_to_bf16(static_cast<float>(g.sym()));
  for (const LayerPlan& p : plan.layers) block(e, c, p, sh);
  // Engram: primes from the layout rule, odd multipliers drawn here, a random token map.
  EngramLayout engram;
  std::vector<int32_t> token_map;
  if (c.has_engram()) {
    engram = compute_engram_layout(c);
    token_map.resize(static_cast<size_t>(V));
    for (auto& t : token_map) t = static_cast<int32_t>(g.next() % c.engram_compressed_vocab_size);
    for (size_t x = 0; x < c.engram_layer_ids.size(); ++x) {
      EngramLayerLayout& L = engram.layers[x];
      const std::string n = fmt::format("layers.{}.engram.", c.engram_layer_ids[x]);
      L.multipliers.clear();
      for (int s = 0; s < c.engram_max_ngram_size; ++s) L.multipliers.push_back(static_cast<int64_t>((g.next() >> 20) | 1));
      const int64_t hd = c.engram_head_dim;
      std::vector<uint8_t> codes(static_cast<size_t>(L.rows * hd));
      for (auto& b : codes) {
        b = static_cast<uint8_t>(g.next());
        if ((b & 0x7f) == 0x7f) b = 0;
      }
      std::vector<uint8_t> scales(static_cast<size_t>(L.rows * (hd / 32)));
      for (auto& b : scales) b = static_cast<uint8_t>(120 + g.next() % 4);
      e.raw(n + "embed.weight", std::move(codes));
      e.raw(n + "embed.scale", std::move(scales));
      const int64_t R = static_cast<int64_t>(L.primes.size()) * hd;
      e.fp8(n + "wkv", (c.hc_mult + 1) * D, R, sh.engram_out / std::sqrt(static_cast<double>(R)));
      e.floats(n + "q_weight", e.vec(c.hc_mult * D, 1.0, 0.3, true));
      e.floats(n + "k_weight", e.vec(c.hc_mult * D, 1.0, 0.3, true));
    }
  }
  e.floats("norm.weight", e.vec(D, 1.0, sh.norm_spread, true));
  std::vector<float> head = e.bf16w(V, D, 1.0 / std::sqrt(static_cast<double>(D)));
  if (sh.head_peak > 0) add_successor_rows(head, embed, V, D, sh.head_peak);
  e.floats("head.weight", head);
  e.raw("embed.weight", bytes_of(embed));
  if (c.variant == Variant::v4) {
    const int C = c.hc_mult;
    e.matrix("hc_head_fn", C, C * D, sh.hc_fn / std::sqrt(static_cast<double>(C * D)));
    e.floats("hc_head_base", e.vec(C, 0.0, sh.hc_base, false));
    e.floats("hc_head_scale", {static_cast<float>(sh.hc_scale + sh.hc_scale_spread * g.sym())});
  }
  if (!plan.dspark.empty()) {
    for (const LayerPlan& p : plan.dspark) block(e, c, p, sh);
    const int64_t taps = c.dspark_main_dim();
    e.fp8("mtp.0.main_proj", D, taps, 1.0 / std::sqrt(static_cast<double>(taps)));
    e.floats("mtp.0.main_norm.weight", e.vec(D, 1.0, 0.2, true));
    const std::string last = plan.dspark.back().name() + ".";
    e.floats(last + "norm.weight", e.vec(D, 1.0, 0.2, true));
    const int64_t R = c.dspark_markov_rank;
    std::vector<uint16_t> markov(static_cast<size_t>(V * R));
    for (auto& x : markov) x = f32_to_bf16(static_cast<float>(g.sym()));
    e.raw(last + "markov_head.embed.weight", bytes_of(markov));
    e.matrix(last + "markov_head.head.weight", V, R, 1.0 / std::sqrt(static_cast<double>(R)));
    e.matrix(last + "confidence_head.proj.weight", 1, D + R, 1.0 / std::sqrt(static_cast<double>(D + R)));
  }
  auto m = model_from_store(c, std::move(store), std::move(engram), std::move(token_map));
  DSV4_CHECK(m.ok());
  return std::move(*m);
}

}  // namespace dsv4::family
