// The keyed sampler: greedy argmax, or temperature/top-k/top-p/min-p then Gumbel-max keyed by (seed, position, id).
#include "lanes/sampling.h"

#include "lanes/partition_sum.h"
#include "lanes/token_mask.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>

namespace dsv4::lanes {
namespace {

// NaN logits never win: they read as -inf.
double logit_value(float x) {
  return std::isnan(x) ? -std::numeric_limits<double>::infinity() : static_cast<double>(x);
}

// Best first: larger logit_value, then lower id (a strict total order, so every sort by it gives one sequence). A key
// whose ascending order is that one: the logit's order (NaN read as -inf, -0 as +0, as their doubles compare), then
// the id.
uint64_t better_first_key(float x, TokenId id) {
  if (std::isnan(x)) x = -std::numeric_limits<float>::infinity();
  if (x == 0.0f) x = 0.0f;
  const uint32_t b = std::bit_cast<uint32_t>(x);
  const uint32_t ascending = (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);  // orders floats as their values
  return (static_cast<uint64_t>(~ascending) << 32) | static_cast<uint32_t>(id);
}

// The `count` best ids of the row, best first: a partial sort of packed keys, or for the whole row
// a stable radix sort of the value keys over ids in ascending order (4 passes of 8 bits), which is the same sequence.
std::vector<TokenId> best_first(std::span<const float> logits, size_t count) {
  const size_t n = logits.size();
  count = std::min(count, n);
  if (count < n) {
    std::vector<uint64_t> keys(n);
    for (size_t i = 0; i < n; ++i) keys[i] = better_first_key(logits[i], static_cast<TokenId>(i));
    std::partial_sort(keys.begin(), keys.begin() + static_cast<ptrdiff_t>(count), keys.end());
    std::vector<TokenId> ids(count);
    for (size_t i = 0; i < count; ++i) ids[i] = static_cast<TokenId>(static_cast<uint32_t>(keys[i]));
    return ids;
  }
  std::vector<uint32_t> key(n), key2(n);
  std::vector<TokenId> ids(n), ids2(n);
  for (size_t i = 0; i < n; ++i) {
    key[i] = static_cast<uint32_t>(better_first_key(logits[i], 0) >> 32);
    ids[i] = static_cast<TokenId>(i);
  }
  for (int shift = 0; shift < 32; shift += 8) {
    std::array<size_t, 257> at{};
    for (size_t i = 0; i < n; ++i) ++at[((key[i] >> shift) & 255u) + 1];
    for (size_t b = 0; b < 256; ++b) at[b + 1] += at[b];
    for (size_t i = 0; i < n; ++i) {
      const size_t to = at[(key[i] >> shift) & 255u]++;
      key2[to] = key[i];
      ids2[to] = ids[i];
    }
    key.swap(key2);
    ids.swap(ids2);
  }
  return ids;
}

bool in(const uint64_t* allowed, size_t i) { return allowed == nullptr || ((allowed[i >> 6] >> (i & 63)) & 1u) != 0; }

// The first best logit among the allowed ids (every id when `allowed` is null); -1 when none is allowed.
TokenId argmax(std::span<const float> logits, const uint64_t* allowed = nullptr) {
  TokenId best = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!in(allowed, i)) continue;
    if (best < 0 || logit_value(logits[i]) > logit_value(logits[static_cast<size_t>(best)])) {
      best = static_cast<TokenId>(i);
    }
  }
  return best;
}

// An upper bound of the Gumbel term -log(-log(u)) over each 1/1024 of key_uniform's range, by the top 10 key bits
// (key_uniform is increasing in the bits): a token whose logit plus the bound of its bucket is below the best score
// so far can neither win nor tie, so its two logarithms are skipped (the draw is the same).
const std::array<double, 1024>& gumbel_bounds() {
  static const std::array<double, 1024> table = [] {
    std::array<double, 1024> t{};
    for (size_t k = 0; k < t.size(); ++k) {
      const double edge = static_cast<double>(k + 1) / 1024.0 + 0x1.0p-52;  // at or above every u of the bucket
      t[k] = edge >= 1.0 ? std::numeric_limits<double>::infinity() : -std::log(-std::log(edge)) + 1e-6;
    }
    return t;
  }();
  return table;
}

// Without top-k and top-p no order is needed: the same Gumbel-max over the whole row (min-p filtered) in id
// order, where a tie goes to the larger logit, then the lower id, exactly as the best-first scan would give.
// Ids outside `allowed` (when set) are skipped, which draws exactly as the row with their logits at -inf would
// (such an id could only win while no allowed id has a finite score, where the masked draw falls back to the
// lowest allowed id, which is what this gives then).
TokenId sample_unsorted(std::span<const float> logits, const SamplingParams& params, double temperature,
                        uint64_t seed, int64_t position, const uint64_t* allowed = nullptr) {
  double top = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < logits.size(); ++i) {
    if (in(allowed, i)) top = std::max(top, logit_value(logits[i]) / temperature);
  }
  const double floor = params.min_p > 0.0f ? top + std::log(static_cast<double>(params.min_p))
                                           : -std::numeric_limits<double>::infinity();
  TokenId best = -1;
  double best_score = -std::numeric_limits<double>::infinity(), best_x = 0.0;
  const uint64_t row = row_key(seed, position);
  const std::array<double, 1024>& bound = gumbel_bounds();
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!in(allowed, i)) continue;
    const double x = logit_value(logits[i]) / temperature;
    if (x < floor || (best >= 0 && x == -std::numeric_limits<double>::infinity())) continue;
    const uint64_t bits = token_key(row, static_cast<TokenId>(i));
    if (best >= 0 && x + bound[bits >> 54] < best_score) continue;
    const double score = gumbel_score(x, bits);
    if (best < 0 || score > best_score || (score == best_score && x > best_x)) {
      best = static_cast<TokenId>(i);
      best_score = score;
      best_x = x;
    }
  }
  return best < 0 ? 0 : best;
}

}  // namespace

uint64_t seed_from_prompt(std::span<const TokenId> prompt) {
  uint64_t h = 0;
  for (TokenId t : prompt) h = splitmix64_mix(h + kGoldenGamma + static_cast<uint32_t>(t));
  return h >> 1;
}

TokenId sample_keyed_among(std::span<const float> logits, const SamplingParams& params, uint64_t seed,
                           int64_t position, const uint64_t* allowed) {
  if (params.greedy()) return argmax(logits, allowed);
  if (params.top_p >= 1.0f && params.top_k <= 0) {
    return sample_unsorted(logits, params, std::max(static_cast<double>(params.temperature), 1e-6), seed, position,
                           allowed);
  }
  return -1;
}

TokenId sample_keyed(std::span<const float> logits, const SamplingParams& params, uint64_t seed,
                     int64_t position) {
  if (logits.empty()) return 0;
  if (params.greedy()) return argmax(logits);
  const double temperature = std::max(static_cast<double>(params.temperature), 1e-6);

  if (params.top_p >= 1.0f && params.top_k <= 0) return sample_unsorted(logits, params, temperature, seed, position);

  // Candidates best first; top-k needs only the k best sorted.
  const size_t n = logits.size();
  const std::vector<TokenId> ids =
      best_first(logits, params.top_k > 0 && static_cast<size_t>(params.top_k) < n ? static_cast<size_t>(params.top_k) : n);
  size_t kept = ids.size();
  std::vector<double> scaled(kept);  // f64 [kept]: logit / T, best first
  for (size_t i = 0; i < kept; ++i) scaled[i] = logit_value(logits[ids[i]]) / temperature;
  const double top = scaled[0];

  // top-p: the smallest best-first prefix whose mass reaches top_p (mass summed best first).
  if (params.top_p < 1.0f) {
    double total = 0.0;
    for (size_t i = 0; i < kept; ++i) total += std::exp(scaled[i] - top);
    const double need = static_cast<double>(params.top_p) * total;
    double cumulative = 0.0;
    size_t cut = kept;
    for (size_t i = 0; i < kept; ++i) {
      cumulative += std::exp(scaled[i] - top);
      if (cumulative >= need) {
        cut = i + 1;
        break;
      }
    }
    kept = std::max<size_t>(cut, 1);
  }
  // min-p: p_i >= min_p * p_max  <=>  x_i >= x_0 + log(min_p).
  if (params.min_p > 0.0f) {
    const double floor = top + std::log(static_cast<double>(params.min_p));
    size_t cut = 1;
    while (cut < kept && scaled[cut] >= floor) ++cut;
    kept = cut;
  }
  // Gumbel-max: argmax x_i - log(-log(u)); the first (best-sorted) candidate wins ties.
  size_t best = 0;
  double best_score = -std::numeric_limits<double>::infinity();
  const uint64_t row = row_key(seed, position);
  for (size_t i = 0; i < kept; ++i) {
    const double score = gumbel_score(scaled[i], token_key(row, ids[i]));
    if (score > best_score) {
      best_score = score;
      best = i;
    }
  }
  return ids[best];
}

TokenId draw_keyed(std::span<const float> logits, const SamplingParams& params, uint64_t seed, int64_t position,
                   std::span<const TokenId> allowed) {
  if (allowed.empty()) return sample_keyed(logits, params, seed, position);
  return draw_masked(logits, params, seed, position, TokenMask::of(static_cast<int32_t>(logits.size()), allowed));
}

LogPartition log_partition(std::span<const float> logits) {
  double max = -std::numeric_limits<double>::infinity();
  for (float l : logits) max = std::max(max, logit_value(l));
  if (!std::isfinite(max)) return {max, std::numeric_limits<double>::quiet_NaN()};
  return partition_from(max, partition_sum(logits, max));
}

LogPartition partition_from(double max, const PartitionSum& sum) {
  if (!std::isfinite(max)) return {max, std::numeric_limits<double>::quiet_NaN()};
  if (max == 0.0) max = 0.0;  // -0 and +0 are the same maximum: one sign whichever id held it
  return {max, std::log(partition_value(sum))};
}

LogPartition partition_from(float top_logit, const PartitionSum& sum) {
  return partition_from(logit_value(top_logit), sum);
}

float logprob_of(float logit, const LogPartition& z) {
  return static_cast<float>(logit_value(logit) - z.max - z.log_sum);
}

float token_logprob(std::span<const float> logits, TokenId token, const LogPartition& z) {
  if (token < 0 || static_cast<size_t>(token) >= logits.size()) return -std::numeric_limits<float>::infinity();
  return logprob_of(logits[static_cast<size_t>(token)], z);
}

float token_logprob(std::span<const float> logits, TokenId token) {
  if (token < 0 || static_cast<size_t>(token) >= logits.size()) return -std::numeric_limits<float>::infinity();
  return token_logprob(logits, token, log_partition(logits));
}

std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int32_t n, const LogPartition& z) {
  std::vector<TokenLogprob> out;
  if (n <= 0 || logits.empty()) return out;
  const size_t count = std::min<size_t>(static_cast<size_t>(n), logits.size());
  const std::vector<TokenId> ids = best_first(logits, count);
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) out.push_back({ids[i], logprob_of(logits[static_cast<size_t>(ids[i])], z)});
  return out;
}

std::vector<TokenLogprob> top_logprobs_among(std::span<const TokenId> ids, std::span<const float> logits, int32_t n,
                                             const LogPartition& z) {
  std::vector<TokenLogprob> out;
  if (n <= 0 || ids.empty() || ids.size() != logits.size()) return out;
  // better_first_key is a strict total order over (logit, id): the n first of any set holding the row's n best.
  std::vector<std::pair<uint64_t, size_t>> keys(ids.size());
  for (size_t k = 0; k < ids.size(); ++k) keys[k] = {better_first_key(logits[k], ids[k]), k};
  const size_t count = std::min<size_t>(static_cast<size_t>(n), keys.size());
  std::partial_sort(keys.begin(), keys.begin() + static_cast<ptrdiff_t>(count), keys.end());
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) out.push_back({ids[keys[i].second], logprob_of(logits[keys[i].second], z)});
  return out;
}

std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int32_t n) {
  if (n <= 0 || logits.empty()) return {};
  return top_logprobs(logits, n, log_partition(logits));
}

}  // namespace dsv4::lanes
