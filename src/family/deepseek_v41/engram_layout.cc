// Engram primes/offsets and numpy-compatible PCG64 multipliers (model-spec.md §3.4, tokenizer-and-chat.md §3.6).
#include "family/deepseek_v41/engram_layout.h"

#include <limits>
#include <set>

namespace dsv4::family {

bool is_prime(int64_t n) {
  if (n < 2) return false;
  if (n % 2 == 0) return n == 2;
  if (n % 3 == 0) return n == 3;
  for (int64_t d = 5; d * d <= n; d += 6)
    if (n % d == 0 || n % (d + 2) == 0) return false;
  return true;
}

EngramLayout compute_engram_layout(const Config& c) {
  EngramLayout out;
  out.max_ngram = c.engram_max_ngram_size;
  out.n_heads = c.engram_n_heads;
  out.cols = c.engram_num_orders() * c.engram_n_heads;
  std::set<int64_t> seen;  // one set across all layers and orders
  for (int32_t layer_id : c.engram_layer_ids) {
    EngramLayerLayout l;
    l.layer_id = layer_id;
    for (int32_t n = 2; n <= c.engram_max_ngram_size; ++n) {
      int64_t current = c.engram_vocab_size - 1;
      for (int32_t h = 0; h < c.engram_n_heads; ++h) {
        int64_t p = current + 1;
        while (!is_prime(p) || seen.count(p)) ++p;
        seen.insert(p);
        current = p;
        l.offsets.push_back(l.rows);
        l.primes.push_back(p);
        l.rows += p;
      }
    }
    l.multipliers = engram_hash_multipliers(layer_id, c.engram_compressed_vocab_size, c.engram_max_ngram_size);
    out.layers.push_back(std::move(l));
  }
  return out;
}

std::vector<int64_t> engram_hash_multipliers(int32_t layer_id, int64_t compressed_vocab, int32_t count) {
  const int64_t bound = std::max<int64_t>(1, (std::numeric_limits<int64_t>::max() / compressed_vocab) / 2);
  NumpyPcg64 rng(static_cast<uint64_t>(10007) * static_cast<uint64_t>(layer_id));
  std::vector<int64_t> m;
  for (int32_t s = 0; s < count; ++s) m.push_back(2 * rng.integers(bound) + 1);
  return m;
}

// ---- numpy SeedSequence (pool size 4, 32-bit words) ----

namespace {
constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875;
constexpr uint32_t kInitB = 0x8b51f9dd, kMultB = 0x58f38ded;
constexpr uint32_t kMixL = 0xca01f9dd, kMixR = 0x4973f715;

uint32_t hashmix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  value ^= value >> 16;
  return value;
}
uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t r = kMixL * x - kMixR * y;
  r ^= r >> 16;
  return r;
}
}  // namespace

void numpy_seed_sequence_state(uint64_t seed, uint64_t out[4]) {
  // Entropy as little-endian 32-bit words (one word for seeds below 2^32; none is zero-length).
  std::vector<uint32_t> entropy = {static_cast<uint32_t>(seed)};
  if (seed >> 32) entropy.push_back(static_cast<uint32_t>(seed >> 32));
  uint32_t pool[4];
  uint32_t hc = kInitA;
  for (int i = 0; i < 4; ++i) pool[i] = hashmix(i < static_cast<int>(entropy.size()) ? entropy[i] : 0, hc);
  for (int src = 0; src < 4; ++src)
    for (int dst = 0; dst < 4; ++dst)
      if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], hc));
  for (size_t src = 4; src < entropy.size(); ++src)
    for (int dst = 0; dst < 4; ++dst) pool[dst] = mix(pool[dst], hashmix(entropy[src], hc));
  uint32_t words[8];
  uint32_t hb = kInitB;
  for (int i = 0; i < 8; ++i) {
    uint32_t v = pool[i % 4];
    v ^= hb;
    hb *= kMultB;
    v *= hb;
    v ^= v >> 16;
    words[i] = v;
  }
  for (int i = 0; i < 4; ++i) out[i] = uint64_t{words[2 * i]} | (uint64_t{words[2 * i + 1]} << 32);
}

// ---- PCG64 ----

namespace {
constexpr unsigned __int128 kPcgMult =
    (static_cast<unsigned __int128>(0x2360ED051FC65DA4ULL) << 64) | 0x4385DF649FCCF645ULL;
}

NumpyPcg64::NumpyPcg64(uint64_t seed) {
  uint64_t s[4];
  numpy_seed_sequence_state(seed, s);
  const unsigned __int128 initstate = (static_cast<unsigned __int128>(s[0]) << 64) | s[1];
  const unsigned __int128 initseq = (static_cast<unsigned __int128>(s[2]) << 64) | s[3];
  inc_ = (initseq << 1) | 1;
  state_ = 0;
  step();
  state_ += initstate;
  step();
}

void NumpyPcg64::step() { state_ = state_ * kPcgMult + inc_; }

uint64_t NumpyPcg64::next_uint64() {
  step();
  const uint64_t x = static_cast<uint64_t>(state_ >> 64) ^ static_cast<uint64_t>(state_);
  const unsigned rot = static_cast<unsigned>(state_ >> 122);
  return rot == 0 ? x : (x >> rot) | (x << (64 - rot));
}

int64_t NumpyPcg64::integers(int64_t high) {
  const uint64_t rng = static_cast<uint64_t>(high) - 1;  // inclusive range
  if (rng == 0) return 0;
  if (rng <= 0xFFFFFFFFULL) {
    // numpy takes a buffered 32-bit Lemire path here; the Engram bounds are far above 2^32.
    DSV4_CHECK(false && "integers(): 32-bit bounded path not implemented");
  }
  const uint64_t excl = rng + 1;
  unsigned __int128 m = static_cast<unsigned __int128>(next_uint64()) * excl;
  uint64_t left = static_cast<uint64_t>(m);
  if (left < excl) {
    const uint64_t threshold = (std::numeric_limits<uint64_t>::max() - rng) % excl;
    while (left < threshold) {
      m = static_cast<unsigned __int128>(next_uint64()) * excl;
      left = static_cast<uint64_t>(m);
    }
  }
  return static_cast<int64_t>(m >> 64);
}

}  // namespace dsv4::family
