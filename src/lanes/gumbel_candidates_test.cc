// The Gumbel candidate draw: with every id it is sample_keyed on any row; with the candidate rule's ids (computed with
// the host's logarithm, or one a few ulps off as a device's may be) it is sample_keyed on regular rows, near ties
// included.
#include "lanes/gumbel_candidates.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace dsv4::lanes {
namespace {

constexpr int32_t kVocab = 129280;  // the DeepSeek-V4 vocabulary

std::vector<float> row_of(std::mt19937& rng, size_t V, float spread, bool irregular) {
  std::vector<float> row(V);
  std::normal_distribution<float> normal(0.f, spread);
  for (float& x : row) {
    const uint32_t k = irregular ? rng() % 50 : 2;
    x = k == 0 ? -std::numeric_limits<float>::infinity() : k == 1 ? std::nanf("") : normal(rng);
  }
  return row;
}

uint64_t seed_of(std::mt19937& rng) { return (static_cast<uint64_t>(rng()) << 32) | rng(); }

// Logarithms a device might return: off by a fixed or input-dependent number of ulps (at most 2).
double step_ulps(double v, int ulps) {
  for (; ulps > 0; --ulps) v = std::nextafter(v, std::numeric_limits<double>::infinity());
  for (; ulps < 0; ++ulps) v = std::nextafter(v, -std::numeric_limits<double>::infinity());
  return v;
}
double log_up(double x) { return step_ulps(std::log(x), 1); }
double log_down(double x) { return step_ulps(std::log(x), -1); }
double log_noisy(double x) {
  uint64_t bits;
  std::memcpy(&bits, &x, 8);
  return step_ulps(std::log(x), static_cast<int>(splitmix64_mix(bits) % 5) - 2);
}
using LogFn = double (*)(double);
constexpr LogFn kLogs[] = {nullptr, log_up, log_down, log_noisy};

TEST(GumbelCandidates, PlainGumbelRows) {
  EXPECT_TRUE(plain_gumbel({0.7f, 0, 1.0f, 0.0f}));
  EXPECT_TRUE(plain_gumbel({1e-9f, 0, 1.0f, 0.0f}));
  EXPECT_FALSE(plain_gumbel({0.0f, 0, 1.0f, 0.0f}));  // greedy
  EXPECT_FALSE(plain_gumbel({0.7f, 5, 1.0f, 0.0f}));
  EXPECT_FALSE(plain_gumbel({0.7f, 0, 0.9f, 0.0f}));
  EXPECT_FALSE(plain_gumbel({0.7f, 0, 1.0f, 0.05f}));
  EXPECT_FALSE(plain_gumbel({std::numeric_limits<float>::infinity(), 0, 1.0f, 0.0f}));
  EXPECT_FALSE(plain_gumbel({std::nanf(""), 0, 1.0f, 0.0f}));
  EXPECT_FALSE(plain_gumbel({0.7f, 0, std::nanf(""), 0.0f}));  // sample_keyed takes the sorted path then
  EXPECT_TRUE(plain_gumbel({0.7f, 0, 1.0f, std::nanf("")}));   // and reads this min-p as off
  EXPECT_EQ(keyed_temperature({1e-9f, 0, 1.0f, 0.0f}), 1e-6);
}

TEST(GumbelCandidates, EveryIdDrawsAsSampleKeyedOnAnyRow) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 120; ++trial) {
    const size_t V = trial < 100 ? 1 + rng() % 3000 : kVocab;
    std::vector<float> row = row_of(rng, V, trial % 3 == 0 ? 0.05f : trial % 3 == 1 ? 2.0f : 12.0f, trial % 2 == 0);
    if (trial % 10 == 0) std::fill(row.begin(), row.begin() + static_cast<ptrdiff_t>((V + 1) / 2), 1.0f);
    if (trial % 17 == 0) std::fill(row.begin(), row.end(), -std::numeric_limits<float>::infinity());
    if (trial % 23 == 0) row[rng() % V] = std::numeric_limits<float>::infinity();
    std::vector<TokenId> ids(V);
    std::iota(ids.begin(), ids.end(), 0);
    for (float t : {1.0f, 0.3f, 2.5f, 1e-7f}) {
      const SamplingParams p{t, 0, 1.0f, 0.0f};
      const uint64_t seed = seed_of(rng);
      const int64_t pos = static_cast<int64_t>(rng() % 1000000);
      EXPECT_EQ(sample_gumbel_candidates(ids, row, p, seed, pos), sample_keyed(row, p, seed, pos))
          << "trial " << trial << " T " << t;
    }
  }
}

TEST(GumbelCandidates, IrregularRowsGoWhole) {
  std::vector<TokenId> ids;
  std::vector<float> row(100, 0.5f);
  EXPECT_EQ(gumbel_candidates(row, 1.0, 3, kMaxGumbelCandidates, &ids), CandidateVerdict::ok);
  for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) {
    row[37] = bad;
    EXPECT_EQ(gumbel_candidates(row, 1.0, 3, kMaxGumbelCandidates, &ids), CandidateVerdict::irregular) << bad;
    EXPECT_TRUE(ids.empty());
  }
}

// The candidates of regular rows, with the host's logarithm or one that is off: the decision is sample_keyed's.
TEST(GumbelCandidates, CandidatesDrawAsSampleKeyed) {
  std::mt19937 rng(12);
  for (int trial = 0; trial < 40; ++trial) {
    const size_t V = trial < 30 ? 1 + rng() % 5000 : kVocab;
    std::vector<float> row = row_of(rng, V, trial % 3 == 0 ? 0.01f : trial % 3 == 1 ? 2.0f : 12.0f, false);
    if (trial % 5 == 0) std::fill(row.begin(), row.end(), 0.25f);  // every logit tied: the Gumbel terms decide
    for (float t : {1.0f, 0.7f, 3.0f, 1e-7f}) {
      const SamplingParams p{t, 0, 1.0f, 0.0f};
      const uint64_t seed = seed_of(rng);
      const int64_t pos = static_cast<int64_t>(rng() % 1000000);
      for (LogFn log : kLogs) {
        std::vector<TokenId> ids;
        ASSERT_EQ(gumbel_candidates(row, keyed_temperature(p), row_key(seed, pos), kMaxGumbelCandidates, &ids, log),
                  CandidateVerdict::ok);
        ASSERT_FALSE(ids.empty());
        ASSERT_TRUE(std::is_sorted(ids.begin(), ids.end()));
        std::vector<float> values;
        for (TokenId id : ids) values.push_back(row[static_cast<size_t>(id)]);
        EXPECT_EQ(sample_gumbel_candidates(ids, values, p, seed, pos), sample_keyed(row, p, seed, pos))
            << "trial " << trial << " T " << t;
      }
    }
  }
}

// Rows built so that the best scores lie about 1e-12 apart, the rule's margin: at T = 1 the tokens whose Gumbel term g
// is in [0.5, 1) (about 19,000 of 129,280) get logit float(-g), so their scores are float roundings within +-3e-8 of 0;
// the rest get -1000. The candidates are then often several and a logarithm a few ulps off reorders them; the
// host's winner must still be among them.
TEST(GumbelCandidates, NearTiesKeepTheWinner) {
  std::mt19937 rng(13);
  int several = 0, rows = 0;
  for (int trial = 0; trial < 24; ++trial) {
    const uint64_t seed = seed_of(rng);
    const int64_t pos = static_cast<int64_t>(rng() % 1000000);
    const uint64_t key = row_key(seed, pos);
    std::vector<float> row(kVocab);
    for (int32_t i = 0; i < kVocab; ++i) {
      const double term = -std::log(-std::log(key_uniform(token_key(key, i))));
      row[static_cast<size_t>(i)] = term >= 0.5 && term < 1.0 ? static_cast<float>(-term) : -1000.0f;
    }
    const SamplingParams p{1.0f, 0, 1.0f, 0.0f};
    for (LogFn log : kLogs) {
      std::vector<TokenId> ids;
      const CandidateVerdict v = gumbel_candidates(row, 1.0, key, kMaxGumbelCandidates, &ids, log);
      ASSERT_NE(v, CandidateVerdict::irregular);
      if (v == CandidateVerdict::too_many) continue;  // goes whole: nothing to decide from candidates
      ++rows;
      several += ids.size() > 1;
      std::vector<float> values;
      for (TokenId id : ids) values.push_back(row[static_cast<size_t>(id)]);
      EXPECT_EQ(sample_gumbel_candidates(ids, values, p, seed, pos), sample_keyed(row, p, seed, pos))
          << "trial " << trial << " with " << ids.size() << " candidates";
    }
  }
  EXPECT_GT(rows, 48);
  EXPECT_GT(several, rows / 8);  // the near-tie regime was reached (about 45% of the rows)
}

}  // namespace
}  // namespace dsv4::lanes
