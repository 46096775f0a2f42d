// The truncated-draw candidates (top-k, top-p, min-p): with the rule's exponential and logarithm those of the host or a
// few ulps off (as a device's may be), the host's decision over the candidates is sample_keyed's token on the whole
// row whenever the row is not sent whole, on many rows and parameter sets (ties, -inf logits, tiny and huge
// temperatures, top_p near 0 and 1, top_k 1 and beyond the vocabulary); rows go whole rarely on realistic logits.
#include "lanes/truncated_candidates.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "lanes/token_mask.h"

namespace dsv4::lanes {
namespace {

constexpr int32_t kVocab = 129280;  // the DeepSeek-V4 vocabulary
constexpr float kInf = std::numeric_limits<float>::infinity();

uint64_t seed_of(std::mt19937& rng) { return (static_cast<uint64_t>(rng()) << 32) | rng(); }

double step_ulps(double v, int ulps) {
  for (; ulps > 0; --ulps) v = std::nextafter(v, std::numeric_limits<double>::infinity());
  for (; ulps < 0; ++ulps) v = std::nextafter(v, -std::numeric_limits<double>::infinity());
  return v;
}
int noise_of(double x) {
  uint64_t bits;
  std::memcpy(&bits, &x, 8);
  return static_cast<int>(splitmix64_mix(bits) % 5) - 2;
}
// Exponentials and logarithms a device might return: off by up to 2 ulps (never below 0: a mass stays a mass).
double exp_up(double x) { return step_ulps(std::exp(x), 2); }
double exp_down(double x) { return std::exp(x) > 0.0 ? std::max(0.0, step_ulps(std::exp(x), -2)) : 0.0; }
double exp_noisy(double x) { return std::exp(x) > 0.0 ? std::max(0.0, step_ulps(std::exp(x), noise_of(x))) : 0.0; }
double log_noisy(double x) { return step_ulps(std::log(x), noise_of(x)); }
double log_up(double x) { return step_ulps(std::log(x), 1); }

using Fn = double (*)(double);
struct Maths {
  Fn exp, log;
};
constexpr Maths kMaths[] = {{nullptr, nullptr}, {exp_up, log_up}, {exp_down, log_noisy}, {exp_noisy, log_noisy}};

struct Tally {
  int decided = 0, uncertain = 0, too_many = 0, irregular = 0, several = 0;
};

// One row under one parameter set with every kind of maths: each decided row draws sample_keyed's token.
void check(const std::vector<float>& row, const SamplingParams& p, uint64_t seed, int64_t pos, Tally& t,
           const char* what) {
  ASSERT_TRUE(truncated_keyed(p)) << what;
  const TokenId want = sample_keyed(row, p, seed, pos);
  const TruncationCut cut = truncation_cut(p, static_cast<int64_t>(row.size()));
  for (const Maths& m : kMaths) {
    std::vector<TokenId> ids;
    const TruncatedVerdict v =
        truncated_candidates(row, cut, row_key(seed, pos), kMaxGumbelCandidates, &ids, m.exp, m.log);
    if (v == TruncatedVerdict::uncertain) ++t.uncertain;
    if (v == TruncatedVerdict::too_many) ++t.too_many;
    if (v == TruncatedVerdict::irregular) ++t.irregular;
    if (v != TruncatedVerdict::ok) {
      EXPECT_TRUE(ids.empty());
      continue;
    }
    ASSERT_FALSE(ids.empty()) << what;
    ASSERT_TRUE(std::is_sorted(ids.begin(), ids.end())) << what;
    std::vector<float> values;
    for (TokenId id : ids) values.push_back(row[static_cast<size_t>(id)]);
    EXPECT_EQ(sample_gumbel_candidates(ids, values, p, seed, pos), want)
        << what << " T " << p.temperature << " top_k " << p.top_k << " top_p " << p.top_p << " min_p " << p.min_p
        << " with " << ids.size() << " candidates";
    ++t.decided;
    t.several += ids.size() > 1;
  }
}

std::vector<float> normal_row(std::mt19937& rng, size_t V, float spread) {
  std::vector<float> row(V);
  std::normal_distribution<float> normal(0.f, spread);
  for (float& x : row) x = normal(rng);
  return row;
}

SamplingParams params_of(std::mt19937& rng, int k, int32_t V) {
  const float temperatures[] = {1.0f, 0.7f, 1.3f, 3.0f, 1e-7f, 40.0f};
  const int32_t top_ks[] = {0, 1, 2, 20, 50, 1000, V - 1, V, V + 5};
  const float top_ps[] = {1.0f, 0.9f, 0.95f, 0.5f, 1e-6f, 0.0f, 0.99999994f, 0.999f};
  const float min_ps[] = {0.0f, 0.05f, 0.0f, 0.3f, 1.0f, 0.0f, 1e-30f};
  SamplingParams p;
  p.temperature = temperatures[rng() % 6];
  p.top_k = top_ks[rng() % 9];
  p.top_p = top_ps[rng() % 8];
  p.min_p = min_ps[rng() % 7];
  if (p.top_k <= 0 && p.top_p >= 1.0f && !(p.min_p > 0.0f)) p.top_p = k % 2 ? 0.9f : 0.5f;  // not plain Gumbel
  return p;
}

TEST(TruncatedCandidates, RowsTheRuleCovers) {
  EXPECT_TRUE(truncated_keyed({0.7f, 5, 1.0f, 0.0f}));
  EXPECT_TRUE(truncated_keyed({0.7f, 0, 0.9f, 0.0f}));
  EXPECT_TRUE(truncated_keyed({0.7f, 0, 1.0f, 0.05f}));
  EXPECT_TRUE(truncated_keyed({0.7f, 0, 1.0f, 1.0f}));
  EXPECT_TRUE(truncated_keyed({0.7f, 0, std::nanf(""), 0.0f}));  // the sorted path with no cut at all
  EXPECT_FALSE(truncated_keyed({0.7f, 0, 1.0f, 1.5f}));  // min-p above 1: the two paths of sample_keyed disagree
  EXPECT_FALSE(truncated_keyed({0.7f, 0, 1.0f, 0.0f}));  // plain Gumbel
  EXPECT_FALSE(truncated_keyed({0.0f, 5, 0.9f, 0.0f}));  // greedy
  EXPECT_FALSE(truncated_keyed({kInf, 5, 0.9f, 0.0f}));
  const TruncationCut c = truncation_cut({0.5f, 40, 0.9f, 0.1f}, 100);
  EXPECT_EQ(c.top_k, 40);
  EXPECT_EQ(c.top_p, static_cast<double>(0.9f));
  EXPECT_EQ(c.log_min_p, std::log(static_cast<double>(0.1f)));
  EXPECT_EQ(c.temperature, 0.5);
  EXPECT_EQ(truncation_cut({0.5f, 100, std::nanf(""), std::nanf("")}, 100).top_k, 0);
  EXPECT_EQ(truncation_cut({0.5f, 100, std::nanf(""), std::nanf("")}, 100).top_p, 1.0);
  EXPECT_EQ(truncation_cut({0.5f, 100, std::nanf(""), std::nanf("")}, 100).log_min_p, -INFINITY);
  EXPECT_EQ(logit_order_key(-0.0f), logit_order_key(0.0f));
  EXPECT_LT(logit_order_key(-kInf), logit_order_key(-1e30f));
  EXPECT_LT(logit_order_key(-1e-45f), logit_order_key(0.0f));
  EXPECT_LT(logit_order_key(1e30f), logit_order_key(kInf));
}

TEST(TruncatedCandidates, IrregularRowsGoWhole) {
  std::vector<TokenId> ids;
  std::vector<float> row(100, 0.5f);
  // The cut falls inside a run of tied logits: where exactly is unknown.
  EXPECT_EQ(truncated_candidates(row, truncation_cut({1.0f, 0, 0.9f, 0.0f}, 100), 3, kMaxGumbelCandidates, &ids),
            TruncatedVerdict::uncertain);
  row[3] = 2.0f;
  const TruncationCut cut = truncation_cut({1.0f, 0, 0.01f, 0.0f}, 100);
  EXPECT_EQ(truncated_candidates(row, cut, 3, kMaxGumbelCandidates, &ids), TruncatedVerdict::ok);
  for (float bad : {std::nanf(""), kInf}) {
    row[37] = bad;
    EXPECT_EQ(truncated_candidates(row, cut, 3, kMaxGumbelCandidates, &ids), TruncatedVerdict::irregular) << bad;
    EXPECT_TRUE(ids.empty());
  }
  std::fill(row.begin(), row.end(), -kInf);
  EXPECT_EQ(truncated_candidates(row, cut, 3, kMaxGumbelCandidates, &ids), TruncatedVerdict::irregular);
}

// Small vocabularies of every shape: ties, -inf, quantized logits, all parameter kinds.
TEST(TruncatedCandidates, SmallRowsDrawAsSampleKeyed) {
  std::mt19937 rng(21);
  Tally t;
  for (int trial = 0; trial < 400; ++trial) {
    const int32_t V = 1 + static_cast<int32_t>(rng() % 600);
    const float spread = trial % 3 == 0 ? 0.05f : trial % 3 == 1 ? 3.0f : 12.0f;
    std::vector<float> row = normal_row(rng, static_cast<size_t>(V), spread);
    const int shape = trial % 6;
    if (shape == 1) std::fill(row.begin(), row.begin() + V / 2, 1.0f);             // ties at the top
    if (shape == 2)
      for (float& x : row) x = std::round(x);                                      // quantized: ties everywhere
    if (shape == 3)
      for (size_t i = 1; i < row.size(); i += 3) row[i] = -kInf;                   // masked-like
    if (shape == 4 && V > 1) row[static_cast<size_t>(rng() % V)] = -0.0f;
    for (int j = 0; j < 4; ++j) {
      const SamplingParams p = params_of(rng, j, V);
      check(row, p, seed_of(rng), static_cast<int64_t>(rng() % 1000000), t, "small");
    }
  }
  std::printf("small rows: decided %d (%d with several candidates), uncertain %d, too many %d, irregular %d\n",
              t.decided, t.several, t.uncertain, t.too_many, t.irregular);
  EXPECT_GT(t.decided, 4000);
  EXPECT_EQ(t.irregular, 0);
}

// The full vocabulary with logits ~ N(0, 3): the rows a device sees; nearly every one is decided from candidates.
TEST(TruncatedCandidates, RealisticRowsRarelyGoWhole) {
  std::mt19937 rng(22);
  Tally t;
  const SamplingParams sets[] = {{1.0f, 0, 0.9f, 0.0f},  {0.7f, 0, 0.95f, 0.0f}, {1.0f, 40, 1.0f, 0.0f},
                                 {0.8f, 50, 0.9f, 0.05f}, {1.0f, 0, 1.0f, 0.05f}, {1.3f, 0, 0.5f, 0.0f},
                                 {1.0f, 1, 1.0f, 0.0f},  {1.0f, 0, 0.999f, 0.0f}};
  for (int trial = 0; trial < 24; ++trial) {
    const std::vector<float> row = normal_row(rng, kVocab, 3.0f);
    for (const SamplingParams& p : sets)
      check(row, p, seed_of(rng), static_cast<int64_t>(rng() % 1000000), t, "N(0,3)");
  }
  std::printf("N(0, 3) rows: decided %d, uncertain %d, too many %d\n", t.decided, t.uncertain, t.too_many);
  const int all = t.decided + t.uncertain + t.too_many;
  EXPECT_EQ(all, 24 * 8 * 4);
  EXPECT_LE(t.uncertain + t.too_many, all / 100);
}

// top_p placed right at the host's running sums: the cut falls between two ids by a hair, or exactly on one. The rule
// must send such rows whole or decide them exactly.
TEST(TruncatedCandidates, TopPAtTheHostsRunningSums) {
  std::mt19937 rng(23);
  Tally t;
  for (int trial = 0; trial < 30; ++trial) {
    const size_t V = trial < 20 ? 2000 : kVocab;
    const std::vector<float> row = normal_row(rng, V, 2.0f);
    const double T = 1.0;
    std::vector<size_t> order(V);
    for (size_t i = 0; i < V; ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    const double top = row[order[0]] / T;
    double total = 0.0;
    for (size_t i : order) total += std::exp(row[i] / T - top);
    double cum = 0.0;
    const size_t at = 1 + rng() % 40;
    for (size_t j = 0; j < at; ++j) cum += std::exp(row[order[j]] / T - top);
    for (float p : {static_cast<float>(cum / total), std::nextafter(static_cast<float>(cum / total), 0.0f),
                    std::nextafter(static_cast<float>(cum / total), 1.0f)}) {
      check(row, {1.0f, 0, p, 0.0f}, seed_of(rng), trial, t, "at the running sums");
    }
  }
  std::printf("top_p at running sums: decided %d, uncertain %d\n", t.decided, t.uncertain);
  EXPECT_GT(t.decided, 0);
}

// Masked rows as a device reduces them (lanes::draw_row under a TokenMask): truncated rows with the other logits at
// -inf (draw_masked's masked copy) through the rule; argmax and plain Gumbel rows over the allowed ids alone (the first
// allowed id of largest logit; the Gumbel decision over every allowed id, a superset of any candidate set). Masks of
// one id, of every id, of random subsets, with NaN and -inf inside and outside them.
TEST(TruncatedCandidates, MaskedRowsDrawAsDrawRow) {
  std::mt19937 rng(24);
  Tally t;
  int plain = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int32_t V = 1 + static_cast<int32_t>(rng() % 3000);
    std::vector<float> row = normal_row(rng, static_cast<size_t>(V), trial % 2 ? 3.0f : 0.3f);
    if (trial % 5 == 1) row[rng() % static_cast<size_t>(V)] = std::nanf("");
    if (trial % 5 == 2) row[rng() % static_cast<size_t>(V)] = -kInf;
    TokenMask mask(V);
    const int kind = trial % 4;
    if (kind == 0) mask.allow(static_cast<TokenId>(rng() % static_cast<uint32_t>(V)));
    for (TokenId i = 0; i < V; ++i)
      if (kind == 1 || (kind >= 2 && rng() % (kind == 2 ? 3 : 40) == 0)) mask.allow(i);
    if (mask.empty()) mask.allow(0);
    const uint64_t seed = seed_of(rng);
    const int64_t pos = static_cast<int64_t>(rng() % 1000000);
    // Truncated: the rule over the masked copy.
    std::vector<float> masked(row.size(), -kInf);
    bool finite_allowed = true;
    for (TokenId i = 0; i < V; ++i) {
      if (!mask.contains(i)) continue;
      masked[static_cast<size_t>(i)] = row[static_cast<size_t>(i)];
      finite_allowed = finite_allowed && std::isfinite(row[static_cast<size_t>(i)]);
    }
    for (int j = 0; j < 3; ++j) {
      const SamplingParams p = params_of(rng, j, V);
      const TokenId want = draw_row(row, p, seed, pos, &mask);
      std::vector<TokenId> ids;
      const TruncatedVerdict v = truncated_candidates(masked, truncation_cut(p, V), row_key(seed, pos),
                                                      kMaxGumbelCandidates, &ids, exp_noisy, log_noisy);
      if (v != TruncatedVerdict::ok) {
        ++t.uncertain;
        continue;
      }
      std::vector<float> values;
      for (TokenId id : ids) values.push_back(row[static_cast<size_t>(id)]);
      EXPECT_EQ(sample_gumbel_candidates(ids, values, p, seed, pos), want) << "trial " << trial << " masked truncated";
      ++t.decided;
    }
    // Greedy and plain Gumbel over the allowed ids.
    const std::vector<TokenId> allowed = mask.ids();
    std::vector<float> values;
    TokenId best = allowed[0];
    for (TokenId id : allowed) {
      values.push_back(row[static_cast<size_t>(id)]);
      const double a = std::isnan(row[static_cast<size_t>(id)]) ? -INFINITY : row[static_cast<size_t>(id)];
      const double b = std::isnan(row[static_cast<size_t>(best)]) ? -INFINITY : row[static_cast<size_t>(best)];
      if (a > b) best = id;
    }
    EXPECT_EQ(best, draw_row(row, {0.0f, 0, 1.0f, 0.0f}, seed, pos, &mask)) << "trial " << trial << " masked argmax";
    if (finite_allowed) {
      const SamplingParams p{trial % 3 ? 0.8f : 2.0f, 0, 1.0f, 0.0f};
      EXPECT_EQ(sample_gumbel_candidates(allowed, values, p, seed, pos), draw_row(row, p, seed, pos, &mask))
          << "trial " << trial << " masked Gumbel";
      ++plain;
    }
  }
  std::printf("masked rows: truncated decided %d, whole %d; plain Gumbel %d\n", t.decided, t.uncertain, plain);
  EXPECT_GT(t.decided, 300);
  EXPECT_GT(plain, 100);
}

}  // namespace
}  // namespace dsv4::lanes
