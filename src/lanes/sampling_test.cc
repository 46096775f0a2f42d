// Keyed sampler tests: SplitMix64 published vectors, and draws checked against tests/reference/keyed_sampler.py.
#include "lanes/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace dsv4::lanes {
namespace {

// The row tests/reference/keyed_sampler.py samples (ROW): ties at ids 2 and 4.
constexpr std::array<float, 8> kRow = {1.5f, -0.25f, 2.0f, 0.75f, 2.0f, -3.0f, 0.5f, 1.25f};

TEST(SplitMix64, PublishedSequenceFromSeedZero) {
  // First four outputs of Vigna's splitmix64.c with x = 0 (published, e.g. in the xoshiro seeding notes).
  EXPECT_EQ(splitmix64_nth(0, 1), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(splitmix64_nth(0, 2), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(splitmix64_nth(0, 3), 0x06C45D188009454Full);
  EXPECT_EQ(splitmix64_nth(0, 4), 0xF88BB8A8724C81ECull);
}

TEST(KeyedSampler, KeyBitsMatchReference) {
  // Values printed by tests/reference/keyed_sampler.py.
  EXPECT_EQ(key_bits(42, 7, 3), 0x93262A4B77F53D1Bull);
  EXPECT_EQ(key_bits((1ull << 63) + 5, 123456789, 128000), 0xA128347FAE4D4841ull);
}

TEST(KeyedSampler, PromptSeedMatchesReference) {
  const std::array<TokenId, 3> a = {1, 2, 3};
  const std::array<TokenId, 2> b = {128000, -1};
  EXPECT_EQ(seed_from_prompt(a), 0x35728AE0E0563F1Bull);
  EXPECT_EQ(seed_from_prompt(b), 0x414C78F985B7C3C7ull);
}

TEST(KeyedSampler, UniformNeverZeroNorAboveOne) {
  EXPECT_EQ(key_uniform(0), 0x1.0p-54);
  EXPECT_EQ(key_uniform(~0ull), 1.0 - 0x1.0p-53 + 0x1.0p-54);
}

struct DrawCase {
  SamplingParams params;
  std::array<TokenId, 16> expected;  // draws at positions 100..115 with seed 99
};

TEST(KeyedSampler, DrawsMatchReference) {
  // Expectations printed by tests/reference/keyed_sampler.py ("draws (T, top_k, top_p, min_p) [...]").
  const DrawCase cases[] = {
      {{1.0f, 0, 1.0f, 0.0f}, {6, 4, 0, 4, 4, 2, 6, 3, 2, 4, 2, 4, 2, 2, 0, 4}},
      {{0.7f, 5, 0.9f, 0.05f}, {7, 4, 0, 4, 4, 2, 2, 7, 2, 4, 2, 4, 2, 2, 0, 4}},
      {{1.3f, 0, 0.8f, 0.0f}, {3, 4, 0, 4, 4, 2, 2, 3, 2, 4, 7, 4, 2, 2, 0, 4}},
      {{2.0f, 3, 1.0f, 0.2f}, {2, 4, 0, 4, 4, 2, 2, 2, 2, 4, 2, 4, 2, 2, 0, 4}},
      {{0.8f, 0, 1.0f, 0.3f}, {7, 4, 0, 4, 4, 2, 2, 7, 2, 4, 2, 4, 2, 2, 0, 4}},  // unsorted path with min-p
  };
  for (const DrawCase& c : cases) {
    for (int i = 0; i < 16; ++i) {
      EXPECT_EQ(sample_keyed(kRow, c.params, 99, 100 + i), c.expected[i])
          << "T=" << c.params.temperature << " position " << 100 + i;
    }
  }
}

TEST(KeyedSampler, GreedyTakesLowestIdOnTies) {
  EXPECT_EQ(sample_keyed(kRow, SamplingParams{}, 1, 0), 2);
  const std::array<float, 3> nan_first = {NAN, -1.0f, -2.0f};
  EXPECT_EQ(sample_keyed(nan_first, SamplingParams{}, 1, 0), 1);
}

TEST(KeyedSampler, TruncationsKeepOnlyTheirSets) {
  // top_k = 1 is greedy at every position and seed; top_k = 2 only ever draws the tied best pair {2, 4}.
  for (int64_t pos = 0; pos < 500; ++pos) {
    EXPECT_EQ(sample_keyed(kRow, {1.0f, 1, 1.0f, 0.0f}, 7, pos), 2);
    TokenId t = sample_keyed(kRow, {5.0f, 2, 1.0f, 0.0f}, 7, pos);
    EXPECT_TRUE(t == 2 || t == 4) << t;
    // min_p = 0.5 keeps x >= 2 + ln 0.5 = 1.307 at T = 1: ids 2, 4 and 0 (1.5); id 7 (1.25) falls below.
    t = sample_keyed(kRow, {1.0f, 0, 1.0f, 0.5f}, 7, pos);
    EXPECT_TRUE(t == 2 || t == 4 || t == 0) << t;
  }
}

TEST(KeyedSampler, FrequenciesFollowTheDistribution) {
  // logits = ln p for p = (1/2, 1/4, 1/8, 1/8); 40,000 keyed draws; each count within 5 binomial sigmas.
  const std::array<double, 4> p = {0.5, 0.25, 0.125, 0.125};
  std::array<float, 4> logits;
  for (int i = 0; i < 4; ++i) logits[i] = static_cast<float>(std::log(p[i]));
  std::array<int, 4> counts = {};
  const int n = 40000;
  for (int64_t pos = 0; pos < n; ++pos) counts[sample_keyed(logits, {1.0f, 0, 1.0f, 0.0f}, 2024, pos)]++;
  for (int i = 0; i < 4; ++i) {
    const double mean = n * p[i], sigma = std::sqrt(n * p[i] * (1 - p[i]));
    EXPECT_NEAR(counts[i], mean, 5 * sigma) << "token " << i;
  }
}

TEST(KeyedSampler, LogprobsOfTheRawDistribution) {
  // logits = ln(1/2), ln(1/4), ln(1/4) (+3, a shift that must not matter): logprobs are ln of those p.
  const std::array<float, 3> logits = {static_cast<float>(std::log(0.5) + 3), static_cast<float>(std::log(0.25) + 3),
                                       static_cast<float>(std::log(0.25) + 3)};
  EXPECT_NEAR(token_logprob(logits, 0), std::log(0.5), 1e-6);
  EXPECT_NEAR(token_logprob(logits, 2), std::log(0.25), 1e-6);
  auto top = top_logprobs(logits, 2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].token, 0);
  EXPECT_EQ(top[1].token, 1);  // tie with id 2: lower id first
  EXPECT_NEAR(top[1].logprob, std::log(0.25), 1e-6);
}

// The Gumbel-max draw without top-k / top-p as its definition reads (every token's two logarithms, id order, a tie
// to the larger logit, then the lower id): the sampler skips the tokens that cannot win, and must draw the same.
TokenId unsorted_by_definition(const std::vector<float>& row, const SamplingParams& p, uint64_t seed, int64_t pos) {
  auto value = [](float x) { return std::isnan(x) ? -std::numeric_limits<double>::infinity() : static_cast<double>(x); };
  const double t = std::max(static_cast<double>(p.temperature), 1e-6);
  double top = -std::numeric_limits<double>::infinity();
  for (float l : row) top = std::max(top, value(l) / t);
  const double floor = p.min_p > 0.0f ? top + std::log(static_cast<double>(p.min_p)) : -std::numeric_limits<double>::infinity();
  TokenId best = -1;
  double best_score = -std::numeric_limits<double>::infinity(), best_x = 0.0;
  for (size_t i = 0; i < row.size(); ++i) {
    const double x = value(row[i]) / t;
    if (x < floor || (best >= 0 && x == -std::numeric_limits<double>::infinity())) continue;
    const double score = x - std::log(-std::log(key_uniform(key_bits(seed, pos, static_cast<TokenId>(i)))));
    if (best < 0 || score > best_score || (score == best_score && x > best_x)) {
      best = static_cast<TokenId>(i);
      best_score = score;
      best_x = x;
    }
  }
  return best < 0 ? 0 : best;
}

TEST(KeyedSampler, SkippingTokensThatCannotWinDrawsTheSame) {
  std::mt19937 rng(5);
  int checked = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const size_t V = 10 + rng() % 3000;
    std::vector<float> row(V);
    const float spread = trial % 3 == 0 ? 0.05f : trial % 3 == 1 ? 2.0f : 12.0f;  // flat, typical, peaky rows
    std::normal_distribution<float> normal(0.f, spread);
    for (float& x : row) {
      const uint32_t k = rng() % 60;
      x = k == 0 ? -std::numeric_limits<float>::infinity() : k == 1 ? std::nanf("") : normal(rng);
    }
    if (trial % 10 == 0) std::fill(row.begin(), row.begin() + static_cast<ptrdiff_t>(V / 2), 1.0f);  // many ties
    for (const SamplingParams& p : {SamplingParams{1.0f, 0, 1.0f, 0.0f}, SamplingParams{0.3f, 0, 1.0f, 0.0f},
                                    SamplingParams{2.0f, 0, 1.0f, 0.1f}, SamplingParams{1e-7f, 0, 1.0f, 0.0f}}) {
      const uint64_t seed = (static_cast<uint64_t>(rng()) << 32) | rng();
      const int64_t pos = static_cast<int64_t>(rng() % 100000);
      EXPECT_EQ(sample_keyed(row, p, seed, pos), unsorted_by_definition(row, p, seed, pos))
          << "trial " << trial << " T " << p.temperature;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 1200);
}

// The sorted draw (top-k / top-p / min-p) as its definition reads: every id sorted best first by comparisons (larger
// logit, NaN as -inf, then lower id), then the cuts and the Gumbel-max over the kept prefix. The sampler sorts packed
// keys instead (a radix sort for whole rows) and must give the same sequence, so the same draws and logprobs.
std::vector<TokenId> sorted_by_definition(const std::vector<float>& row) {
  auto value = [](float x) { return std::isnan(x) ? -std::numeric_limits<double>::infinity() : static_cast<double>(x); };
  std::vector<TokenId> ids(row.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<TokenId>(i);
  std::sort(ids.begin(), ids.end(), [&](TokenId a, TokenId b) {
    const double la = value(row[a]), lb = value(row[b]);
    return la != lb ? la > lb : a < b;
  });
  return ids;
}

TokenId truncated_by_definition(const std::vector<float>& row, const SamplingParams& p, uint64_t seed, int64_t pos) {
  auto value = [](float x) { return std::isnan(x) ? -std::numeric_limits<double>::infinity() : static_cast<double>(x); };
  const std::vector<TokenId> ids = sorted_by_definition(row);
  const double t = std::max(static_cast<double>(p.temperature), 1e-6);
  size_t kept = p.top_k > 0 ? std::min<size_t>(static_cast<size_t>(p.top_k), ids.size()) : ids.size();
  std::vector<double> scaled(kept);
  for (size_t i = 0; i < kept; ++i) scaled[i] = value(row[ids[i]]) / t;
  if (p.top_p < 1.0f) {
    double total = 0.0;
    for (size_t i = 0; i < kept; ++i) total += std::exp(scaled[i] - scaled[0]);
    const double need = static_cast<double>(p.top_p) * total;
    double cumulative = 0.0;
    size_t cut = kept;
    for (size_t i = 0; i < kept; ++i) {
      cumulative += std::exp(scaled[i] - scaled[0]);
      if (cumulative >= need) {
        cut = i + 1;
        break;
      }
    }
    kept = std::max<size_t>(cut, 1);
  }
  if (p.min_p > 0.0f) {
    const double floor = scaled[0] + std::log(static_cast<double>(p.min_p));
    size_t cut = 1;
    while (cut < kept && scaled[cut] >= floor) ++cut;
    kept = cut;
  }
  size_t best = 0;
  double best_score = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < kept; ++i) {
    const double score = scaled[i] - std::log(-std::log(key_uniform(key_bits(seed, pos, ids[i]))));
    if (score > best_score) {
      best_score = score;
      best = i;
    }
  }
  return ids[best];
}

TEST(KeyedSampler, SortedDrawsAndTopLogprobsFollowTheComparisonOrder) {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 60; ++trial) {
    const size_t V = trial < 50 ? 1 + rng() % 4000 : 129280;
    std::vector<float> row(V);
    std::normal_distribution<float> normal(0.f, trial % 3 == 0 ? 0.01f : 4.0f);
    for (float& x : row) {
      const uint32_t k = rng() % 40;
      x = k == 0   ? std::nanf("")
          : k == 1 ? -std::numeric_limits<float>::infinity()
          : k == 2 ? std::numeric_limits<float>::infinity()
          : k == 3 ? 0.0f
          : k == 4 ? -0.0f
          : k == 5 ? -std::nanf("")
                   : normal(rng);
      if (trial % 4 == 0) x = std::round(x);  // many ties
    }
    if (trial % 9 == 0) std::fill(row.begin(), row.end(), 1.0f);
    // The whole order, through top_logprobs of every id.
    const std::vector<TokenId> want = sorted_by_definition(row);
    const std::vector<TokenLogprob> all = top_logprobs(row, static_cast<int32_t>(V));
    ASSERT_EQ(all.size(), V);
    for (size_t i = 0; i < V; ++i) ASSERT_EQ(all[i].token, want[i]) << "trial " << trial << " rank " << i;
    const std::vector<TokenLogprob> some = top_logprobs(row, 20);
    for (size_t i = 0; i < some.size(); ++i) {
      EXPECT_EQ(some[i].token, want[i]);
      EXPECT_EQ(std::bit_cast<uint32_t>(some[i].logprob), std::bit_cast<uint32_t>(all[i].logprob));  // NaN too
    }
    for (const SamplingParams& p : {SamplingParams{0.8f, 0, 0.9f, 0.0f}, SamplingParams{1.3f, 40, 1.0f, 0.0f},
                                    SamplingParams{0.7f, 5, 0.95f, 0.05f}, SamplingParams{2.0f, 0, 0.5f, 0.1f}}) {
      const uint64_t seed = (static_cast<uint64_t>(rng()) << 32) | rng();
      const int64_t pos = static_cast<int64_t>(rng() % 100000);
      EXPECT_EQ(sample_keyed(row, p, seed, pos), truncated_by_definition(row, p, seed, pos))
          << "trial " << trial << " top_k " << p.top_k << " top_p " << p.top_p;
    }
  }
}

}  // namespace
}  // namespace dsv4::lanes
