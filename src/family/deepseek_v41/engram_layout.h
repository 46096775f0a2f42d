// Engram table layout (model-spec.md §3.4 b, c): per-layer primes, row offsets and hash multipliers.
#pragma once

#include <cstdint>
#include <vector>

#include "family/deepseek_v41/config.h"

namespace dsv4::family {

// One Engram layer's hash layout. Columns are ordered (n = 2 heads 0..h-1, n = 3 heads ..., ...).
struct EngramLayerLayout {
  int32_t layer_id = 0;
  std::vector<int64_t> primes;       // [cols]: bucket count of each (order, head) column
  std::vector<int64_t> offsets;      // [cols]: first table row of each column (running sum of primes)
  std::vector<int64_t> multipliers;  // [max_ngram]: odd multiplier per lookback s = 0..max_ngram-1
  int64_t rows = 0;                  // table rows = sum of primes (= engram_num_embeddings)
};

struct EngramLayout {
  int32_t max_ngram = 0;  // n-gram orders 2..max_ngram
  int32_t n_heads = 0;
  int32_t cols = 0;       // (max_ngram - 1) * n_heads row ids per position per layer
  std::vector<EngramLayerLayout> layers;  // in engram_layer_ids order
};

// Primes by the reference procedure: for each layer (in order), each order n, each head: the smallest
// prime strictly above `current` that no earlier column of any layer took; `current` restarts at
// engram_vocab_size - 1 for every (layer, order) and advances to each prime taken. Multipliers per
// engram_hash_multipliers. Needs a config with Engram layers (validate_config checks the rest).
EngramLayout compute_engram_layout(const Config& c);

// m[s] = 2 * v[s] + 1 with v = numpy default_rng(10007 * layer_id).integers(0, bound, count, int64),
// bound = max(1, (INT64_MAX / compressed_vocab) / 2) (model-spec.md §3.4c).
std::vector<int64_t> engram_hash_multipliers(int32_t layer_id, int64_t compressed_vocab, int32_t count);

bool is_prime(int64_t n);

// numpy's SeedSequence(entropy=seed).generate_state(4, uint64) (tokenizer-and-chat.md §3.6 step 1).
void numpy_seed_sequence_state(uint64_t seed, uint64_t out[4]);

// numpy.random.default_rng(seed): PCG64 (XSL-RR 128/64) seeded through SeedSequence.
class NumpyPcg64 {
 public:
  explicit NumpyPcg64(uint64_t seed);
  uint64_t next_uint64();
  // integers(0, high, dtype=int64) for one draw (Lemire's bounded method, as numpy >= 1.17).
  int64_t integers(int64_t high);
  unsigned __int128 state() const { return state_; }
  unsigned __int128 inc() const { return inc_; }

 private:
  void step();
  unsigned __int128 state_ = 0;
  unsigned __int128 inc_ = 0;
};

}  // namespace dsv4::family
