// The keyed sampler: a token draw depends only on (seed, absolute position, logits row) — never on the batch.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

namespace dsv4::lanes {

using TokenId = int32_t;

// How one request draws its tokens. temperature == 0 means greedy (argmax, lowest id on ties).
struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy; otherwise logits are divided by max(temperature, 1e-6)
  int32_t top_k = 0;         // keep the k best tokens; 0 = off
  float top_p = 1.0f;        // keep the smallest best-first set whose probability reaches top_p; 1 = off
  float min_p = 0.0f;        // keep tokens with p >= min_p * p_max (applied after top_p); 0 = off

  bool greedy() const { return temperature <= 0.0f; }
};

// One alternative with its log-probability under the raw (temperature 1, untruncated) distribution.
struct TokenLogprob {
  TokenId token = 0;
  float logprob = 0.0f;
};

// SplitMix64's output finalizer (Steele, Lea, Flood 2014; Vigna's splitmix64.c).
constexpr uint64_t splitmix64_mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ull;  // SplitMix64's increment

// The i-th output (i from 1) of SplitMix64 started at `state`: mix(state + i * gamma).
constexpr uint64_t splitmix64_nth(uint64_t state, uint64_t i) {
  return splitmix64_mix(state + i * kGoldenGamma);
}

// 64 random bits keyed by (seed, position, token): mix(mix(mix(seed + gamma) ^ position * C) ^ token), as the row's
// key (the first two mixes, shared by every token of a row) and the token's mix of it.
constexpr uint64_t row_key(uint64_t seed, int64_t position) {
  const uint64_t h = splitmix64_mix(seed + kGoldenGamma);
  return splitmix64_mix(h ^ (static_cast<uint64_t>(position) * 0xD1B54A32D192ED03ull));
}
constexpr uint64_t token_key(uint64_t row, TokenId token) {
  return splitmix64_mix(row ^ static_cast<uint64_t>(static_cast<uint32_t>(token)));
}
constexpr uint64_t key_bits(uint64_t seed, int64_t position, TokenId token) {
  return token_key(row_key(seed, position), token);
}

// A uniform double in (0, 1] from 64 bits: top 53 bits * 2^-53 + 2^-54 (never 0, so log(u) is finite; all-ones top
// bits round to exactly 1). constexpr so a device sampler computes the same u (the product is exact, so a fused
// multiply-add gives the same bits).
constexpr double key_uniform(uint64_t bits) {
  return static_cast<double>(bits >> 11) * 0x1.0p-53 + 0x1.0p-54;
}

// The Gumbel-max score of a token: x - log(-log(u)) for x = logit / T and u = key_uniform(bits). Every keyed draw
// computes its scores with this one expression.
inline double gumbel_score(double x, uint64_t bits) { return x - std::log(-std::log(key_uniform(bits))); }

// The seed of a request that gave none: a SplitMix64 fold over its prompt ids, 63 bits.
uint64_t seed_from_prompt(std::span<const TokenId> prompt);

// Draws the token for the row predicting `position` from logits (f32 [V]). Greedy ignores seed.
// Gumbel-max over the kept candidates: argmax of x/T - log(-log(u(seed, position, id))).
TokenId sample_keyed(std::span<const float> logits, const SamplingParams& params, uint64_t seed,
                     int64_t position);

// The draw of a row restricted to `allowed` (distinct ids in the vocabulary, any order): sample_keyed on the
// row with every other logit set to -inf, so top-k / top-p / min-p see the masked distribution. `allowed`
// empty: sample_keyed on the whole row.
TokenId draw_keyed(std::span<const float> logits, const SamplingParams& params, uint64_t seed, int64_t position,
                   std::span<const TokenId> allowed);

// sample_keyed's greedy and unsorted (no top-k, no top-p) draws over the ids whose bit is set in `allowed` (a bitset
// over the row; null: every id), equal to sample_keyed on the row with every other logit at -inf wherever an allowed
// id has a finite score; -1 for the sorted draws (top-k / top-p), which the caller runs on a masked copy.
TokenId sample_keyed_among(std::span<const float> logits, const SamplingParams& params, uint64_t seed,
                           int64_t position, const uint64_t* allowed);

// log_softmax's normalizer of a row: its largest logit and log(sum(exp(l - max))) in double (NaN logits read as -inf),
// the sum being the order-free fixed-point sum of partition_sum.h, which a device computes to the same bits; NaN when
// the largest logit is not finite. A row's logprobs may share one.
struct LogPartition {
  double max = 0.0;
  double log_sum = 0.0;
};
LogPartition log_partition(std::span<const float> logits);
// The same from the row's largest logit_value and its partition sum (partition_sum.h), as a device returns them.
struct PartitionSum;
LogPartition partition_from(double max, const PartitionSum& sum);
// The same from the logit of the row's first id of largest logit (NaN read as -inf).
LogPartition partition_from(float top_logit, const PartitionSum& sum);

// The logprob of a token of logit `logit` under the row's partition: logit_value(logit) - max - log_sum in double,
// rounded to float (token_logprob and top_logprobs use this expression).
float logprob_of(float logit, const LogPartition& z);

// log_softmax(logits)[token] in double, rounded to float (the raw distribution, temperature 1).
float token_logprob(std::span<const float> logits, TokenId token);
// The same with the row's partition already computed (z = log_partition(logits)): the same bits.
float token_logprob(std::span<const float> logits, TokenId token, const LogPartition& z);

// The n best tokens of the raw distribution with their logprobs, best first, lowest id on ties.
std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int32_t n);
std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int32_t n, const LogPartition& z);
// top_logprobs from some of the row's ids (distinct, any order) with their logits: the same list whenever `ids` hold
// the row's n best ids (best first, lowest id on ties, NaN read as -inf).
std::vector<TokenLogprob> top_logprobs_among(std::span<const TokenId> ids, std::span<const float> logits, int32_t n,
                                             const LogPartition& z);

}  // namespace dsv4::lanes
