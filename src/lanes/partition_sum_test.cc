// The partition sum shared by host and device samplers: partition_exp close to exp (against long double expl), the
// sum independent of order and of how the row is cut, log_partition close to the row's log-sum-exp computed in long
// double, and the logprobs and top lists rebuilt from a device-style reduction (max, sum, a few ids) equal to those of
// the whole row, bit for bit.
#include "lanes/partition_sum.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "lanes/sampling.h"

namespace dsv4::lanes {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

PartitionSum add(PartitionSum a, PartitionSum b) {
  const unsigned __int128 s = ((static_cast<unsigned __int128>(a.hi) << 64) | a.lo) +
                              ((static_cast<unsigned __int128>(b.hi) << 64) | b.lo);
  return {static_cast<uint64_t>(s), static_cast<uint64_t>(s >> 64)};
}

double ulps_apart(double a, long double b) {
  const double spacing = std::nextafter(a, std::numeric_limits<double>::infinity()) - a;
  return static_cast<double>(std::fabs(static_cast<long double>(a) - b) / spacing);
}

TEST(PartitionSum, ExpIsCloseToExp) {
  EXPECT_EQ(partition_exp(0.0), 1.0);
  EXPECT_EQ(partition_exp(-0.0), 1.0);
  EXPECT_EQ(partition_exp(-45.0000001), 0.0);
  EXPECT_EQ(partition_exp(-std::numeric_limits<double>::infinity()), 0.0);
  std::mt19937_64 rng(31);
  std::uniform_real_distribution<double> d(-45.0, 0.0);
  double worst = 0.0;
  for (int i = 0; i < 200000; ++i) {
    const double x = i < 1000 ? -i * 0.045 : i < 2000 ? -std::ldexp(1.0, -(i - 1000) % 60) : d(rng);
    worst = std::max(worst, ulps_apart(partition_exp(x), std::exp(static_cast<long double>(x))));
  }
  std::printf("partition_exp: worst %.2f ulps from expl on [-45, 0]\n", worst);
  EXPECT_LE(worst, 4.0);
}

std::vector<float> row_of(std::mt19937& rng, size_t V, float spread) {
  std::vector<float> row(V);
  std::normal_distribution<float> normal(0.f, spread);
  for (float& x : row) x = normal(rng);
  return row;
}

// The sum of a row equals the sum of its slices' sums and of any permutation (the device adds slices in any order).
TEST(PartitionSum, OrderAndCutsDoNotMatter) {
  std::mt19937 rng(32);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> row = row_of(rng, 129280, trial % 2 ? 3.0f : 0.5f);
    if (trial % 5 == 0) row[rng() % row.size()] = -kInf;
    if (trial % 7 == 0) row[rng() % row.size()] = std::nanf("");
    double max = -INFINITY;
    for (float l : row) max = std::isnan(l) ? max : std::max(max, static_cast<double>(l));
    const PartitionSum whole = partition_sum(row, max);
    PartitionSum cut{};
    for (size_t at = 0; at < row.size(); at += 4096) {
      const size_t n = std::min<size_t>(4096, row.size() - at);
      cut = add(cut, partition_sum(std::span<const float>(row).subspan(at, n), max));
    }
    EXPECT_EQ(cut, whole);
    std::shuffle(row.begin(), row.end(), rng);
    EXPECT_EQ(partition_sum(row, max), whole);
  }
}

// log_partition against log-sum-exp in long double (an independent computation: expl, logl, a long double sum).
TEST(PartitionSum, LogPartitionIsLogSumExp) {
  std::mt19937 rng(33);
  double worst = 0.0;
  for (int trial = 0; trial < 40; ++trial) {
    const size_t V = trial < 30 ? 1 + rng() % 5000 : 129280;
    std::vector<float> row = row_of(rng, V, trial % 3 == 0 ? 0.01f : trial % 3 == 1 ? 3.0f : 30.0f);
    if (trial % 4 == 0) row[rng() % V] = -kInf;
    const LogPartition z = log_partition(row);
    long double max = -INFINITY, sum = 0;
    for (float l : row) max = std::max(max, static_cast<long double>(l));
    for (float l : row) sum += std::exp(static_cast<long double>(l) - max);
    EXPECT_EQ(z.max, static_cast<double>(max));
    const long double want = std::log(sum);
    worst = std::max(worst, static_cast<double>(std::fabs(static_cast<long double>(z.log_sum) - want)));
    for (size_t i = 0; i < V; i += 1 + V / 50) {
      const long double lp = static_cast<long double>(row[i]) - max - want;
      if (!std::isfinite(static_cast<double>(lp))) continue;
      EXPECT_NEAR(token_logprob(row, static_cast<TokenId>(i)), static_cast<double>(lp), std::fabs(lp) * 1e-6 + 1e-9);
    }
  }
  std::printf("log_partition: worst %.3g from log-sum-exp in long double\n", worst);
  EXPECT_LT(worst, 0x1.0p-40);
  // Rows with no finite largest logit keep NaN partitions (every logprob NaN), as before.
  EXPECT_TRUE(std::isnan(log_partition(std::vector<float>{-kInf, -kInf}).log_sum));
  EXPECT_TRUE(std::isnan(log_partition(std::vector<float>{1.0f, kInf}).log_sum));
}

// A device-style reduction of a row (its largest logit, its partition sum in slices, each slice's n best ids merged)
// gives the whole row's logprobs and top lists, bit for bit.
TEST(PartitionSum, ReductionGivesTheRowsLogprobs) {
  std::mt19937 rng(34);
  for (int trial = 0; trial < 60; ++trial) {
    const size_t V = trial < 50 ? 1 + rng() % 9000 : 129280;
    std::vector<float> row = row_of(rng, V, trial % 3 == 0 ? 0.05f : 3.0f);
    if (trial % 4 == 1)
      for (float& x : row) x = std::round(x);  // ties
    if (trial % 4 == 2) row[rng() % V] = std::nanf("");
    if (trial % 4 == 3) row[rng() % V] = -kInf;
    if (trial % 10 == 9) {  // the largest logit 0, held by -0 and +0: one partition whichever sign comes first
      for (float& x : row) x = -std::fabs(x) - 50.0f;
      row[rng() % V] = -0.0f;
      row[rng() % V] = 0.0f;
    }
    double max = -INFINITY;
    for (float l : row) max = std::isnan(l) ? max : std::max(max, static_cast<double>(l));
    PartitionSum sum{};
    std::vector<TokenId> ids;
    std::vector<float> values;
    const int32_t n = 1 + static_cast<int32_t>(rng() % 20);
    for (size_t at = 0; at < V; at += 4096) {
      const size_t len = std::min<size_t>(4096, V - at);
      const std::span<const float> slice = std::span<const float>(row).subspan(at, len);
      sum = add(sum, partition_sum(slice, max));
      for (const TokenLogprob& t : top_logprobs(slice, n)) {  // the slice's n best
        ids.push_back(static_cast<TokenId>(at) + t.token);
        values.push_back(row[at + static_cast<size_t>(t.token)]);
      }
    }
    size_t a = 0;  // the first id of largest logit (NaN as -inf), whose raw logit a device returns
    for (size_t i = 1; i < V; ++i)
      if ((std::isnan(row[a]) && !std::isnan(row[i])) || (!std::isnan(row[i]) && row[i] > row[a])) a = i;
    const LogPartition z = partition_from(row[a], sum), want = log_partition(row);
    const LogPartition z2 = partition_from(max, sum);
    EXPECT_EQ(std::memcmp(&z2, &want, sizeof z), 0) << "trial " << trial;
    EXPECT_EQ(std::memcmp(&z, &want, sizeof z), 0) << "trial " << trial;
    const std::vector<TokenLogprob> top = top_logprobs_among(ids, values, n, z), top_want = top_logprobs(row, n);
    ASSERT_EQ(top.size(), top_want.size());
    for (size_t i = 0; i < top.size(); ++i) {
      EXPECT_EQ(top[i].token, top_want[i].token) << "trial " << trial << " rank " << i;
      EXPECT_EQ(std::memcmp(&top[i].logprob, &top_want[i].logprob, 4), 0) << "trial " << trial << " rank " << i;
    }
    for (const TokenId t : {static_cast<TokenId>(rng() % V), static_cast<TokenId>(a)}) {
      const float lp = logprob_of(row[static_cast<size_t>(t)], z), lp_want = token_logprob(row, t);
      EXPECT_EQ(std::memcmp(&lp, &lp_want, 4), 0) << "trial " << trial << " token " << t;
    }
  }
}

}  // namespace
}  // namespace dsv4::lanes
