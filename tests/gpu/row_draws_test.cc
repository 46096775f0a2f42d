// Row draws on the device against the host sampler, by equality: the device argmax is sample_keyed's greedy token,
// and the host's decision over the device's Gumbel candidates (plain and truncated rows) is sample_keyed's token, on
// many rows of the real vocabulary (random, flat, peaky, tied, NaN, -inf, +inf, near-tied scores; several seeds,
// positions, temperatures; top-k, top-p and min-p of every kind, counting the rows that come back whole); the logprob
// parts (largest logit, partition sum, best ids, a proposed id's logit) give the host's logprobs bit for bit; rows
// under token masks draw draw_row's token;
// a row's pick does not depend on the rows launched beside it; and the lane adapter over the CUDA forward draws the
// same tokens with row reductions on as with every row whole.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "backends/cuda/forward/forward.h"
#include "backends/cuda/kernels/sample/row_draws.cuh"
#include "backends/cuda/runtime/device_buffer.h"
#include "engine/lane_backend.h"
#include "forward_testing.h"
#include "lanes/gumbel_candidates.h"
#include "lanes/partition_sum.h"
#include "lanes/token_mask.h"
#include "lanes/truncated_candidates.h"
#include "preset_weights_testing.h"

namespace dsv4::cuda {
namespace {

constexpr int64_t kVocab = 129280;
constexpr float kInf = std::numeric_limits<float>::infinity();

struct Row {
  std::vector<float> logits;
  lanes::SamplingParams params;
  uint64_t seed = 0;
  int64_t position = 0;
  bool partition = false;  // logprob parts asked (RowDrawDev::partition, top_n, proposed)
  int32_t top_n = 0;
  int32_t proposed = -1;
  std::shared_ptr<const lanes::TokenMask> mask;  // the row draws under it (draw_row), or null
};

// Rows of every shape at V ids each; greedy rows get NaN, -inf and +inf sprinkled, keyed rows some of them too (those
// must come back whole).
std::vector<Row> make_rows(int64_t V, int count, uint32_t salt) {
  std::mt19937 rng(salt);
  const float temperatures[] = {0.0f, 1.0f, 0.7f, 3.0f, 1e-7f, 0.0f};
  std::vector<Row> rows;
  for (int k = 0; k < count; ++k) {
    Row r;
    r.params.temperature = temperatures[k % 6];
    r.seed = (static_cast<uint64_t>(rng()) << 32) | rng();
    r.position = static_cast<int64_t>(rng() % 2000000);
    r.logits.resize(static_cast<size_t>(V));
    const int shape = (k / 6) % 7;
    const float spread = shape == 0 ? 0.01f : shape == 1 ? 2.0f : 12.0f;
    std::normal_distribution<float> normal(0.0f, spread);
    for (float& x : r.logits) x = normal(rng);
    if (shape == 3) std::fill(r.logits.begin(), r.logits.end(), 0.5f);                      // every id tied
    if (shape == 4) std::fill(r.logits.begin(), r.logits.begin() + V / 2, 7.0f);            // many ties at the top
    if (shape == 5) {                                                                         // quantized: ties
      for (float& x : r.logits) x = std::round(x * 2.0f) / 2.0f;
    }
    if (shape == 6) {  // near-tied Gumbel scores (T = 1): logit float(-g) for g in [0.5, 1), the rest far below
      r.params.temperature = 1.0f;
      const uint64_t key = lanes::row_key(r.seed, r.position);
      for (int64_t i = 0; i < V; ++i) {
        const double g = -std::log(-std::log(lanes::key_uniform(lanes::token_key(key, static_cast<int32_t>(i)))));
        r.logits[static_cast<size_t>(i)] = g >= 0.5 && g < 1.0 ? static_cast<float>(-g) : -1000.0f;
      }
    }
    const bool odd = (k % 5 == 0) || (r.params.greedy() && k % 2 == 0);
    if (odd) {
      for (int j = 0; j < 20; ++j) {
        const size_t at = rng() % static_cast<size_t>(V);
        r.logits[at] = j % 3 == 0 ? std::nanf("") : j % 3 == 1 ? -kInf : kInf;
      }
      if (k % 7 == 0) r.logits[0] = std::nanf("");
    }
    if (k % 29 == 0 && r.params.greedy()) std::fill(r.logits.begin(), r.logits.end(), -kInf);  // all -inf: id 0
    if (k % 31 == 0 && r.params.greedy()) std::fill(r.logits.begin(), r.logits.end(), std::nanf(""));
    rows.push_back(std::move(r));
  }
  return rows;
}

RowDrawDev draw_of(const Row& r) {
  RowDrawDev d;
  if (r.params.greedy()) {
    d.kind = kDrawArgmax;
  } else if (lanes::plain_gumbel(r.params)) {
    d.kind = kDrawGumbel;
    d.temperature = lanes::keyed_temperature(r.params);
    d.key = lanes::row_key(r.seed, r.position);
  } else {
    const lanes::TruncationCut cut = lanes::truncation_cut(r.params, static_cast<int64_t>(r.logits.size()));
    d.kind = kDrawTruncated;
    d.temperature = cut.temperature;
    d.key = lanes::row_key(r.seed, r.position);
    d.top_k = cut.top_k;
    d.top_p = cut.top_p;
    d.log_min_p = cut.log_min_p;
  }
  d.partition = r.partition ? 1 : 0;
  d.top_n = r.top_n;
  d.proposed = r.proposed;
  return d;
}

// The device's picks for `rows` launched together.
std::vector<RowPickDev> device_picks(const std::vector<Row>& rows, int64_t V) {
  const int64_t n = static_cast<int64_t>(rows.size());
  std::vector<float> logits;
  std::vector<RowDrawDev> draws;
  std::vector<uint64_t> masks;
  bool truncated = false, logprobs = false;
  for (const Row& r : rows) {
    logits.insert(logits.end(), r.logits.begin(), r.logits.end());
    draws.push_back(draw_of(r));
    if (r.mask != nullptr) {
      draws.back().mask = static_cast<int64_t>(masks.size());
      masks.insert(masks.end(), r.mask->words(), r.mask->words() + (V + 63) / 64);
    }
    truncated = truncated || draws.back().kind == kDrawTruncated;
    logprobs = logprobs || r.partition || r.top_n > 0 || r.proposed >= 0;
  }
  DeviceBuffer d_logits(logits.size() * 4), d_draws(draws.size() * sizeof(RowDrawDev)),
      d_scratch(row_draw_scratch_bytes(n, V)), d_picks(n * sizeof(RowPickDev)), d_masks(masks.size() * 8 + 8);
  EXPECT_TRUE(d_logits && d_draws && d_scratch && d_picks && d_masks);
  if (!masks.empty())
    EXPECT_EQ(cudaMemcpy(d_masks.get(), masks.data(), masks.size() * 8, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d_logits.get(), logits.data(), logits.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d_draws.get(), draws.data(), draws.size() * sizeof(RowDrawDev), cudaMemcpyHostToDevice),
            cudaSuccess);
  EXPECT_EQ(row_draws(d_logits.as<float>(), n, V, d_draws.as<RowDrawDev>(),
                      masks.empty() ? nullptr : d_masks.as<uint64_t>(), RowDrawPasses{truncated, logprobs},
                      d_scratch.get(), d_picks.as<RowPickDev>(), nullptr),
            cudaSuccess);
  std::vector<RowPickDev> picks(static_cast<size_t>(n));
  EXPECT_EQ(cudaMemcpy(picks.data(), d_picks.get(), n * sizeof(RowPickDev), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return picks;
}

bool has_non_finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return true;
  return false;
}

// A pick's candidates in ascending id order with their logits, each a distinct id of the row whose logit is the
// row's own, bit for bit.
void pick_candidates(const RowPickDev& p, const std::vector<float>& logits, size_t k, std::vector<int32_t>* ids,
                     std::vector<float>* values) {
  ASSERT_GT(p.count, 0) << "row " << k;
  std::vector<std::pair<int32_t, float>> c;
  for (int i = 0; i < p.count; ++i) c.emplace_back(p.ids[i], p.logits[i]);
  std::sort(c.begin(), c.end());
  for (auto& [id, v] : c) {
    ASSERT_GE(id, 0);
    ASSERT_LT(id, static_cast<int32_t>(logits.size()));
    EXPECT_EQ(std::memcmp(&v, &logits[static_cast<size_t>(id)], 4), 0);  // the row's own logit, bit for bit
    ids->push_back(id);
    values->push_back(v);
  }
  EXPECT_EQ(std::set<int32_t>(ids->begin(), ids->end()).size(), ids->size()) << "row " << k;
}

struct Tally {
  int argmax = 0, decided = 0, several = 0, irregular = 0, too_many = 0;
};

// Every pick against sample_keyed on its whole row.
void check_picks(const std::vector<Row>& rows, const std::vector<RowPickDev>& picks, Tally& t) {
  for (size_t k = 0; k < rows.size(); ++k) {
    const Row& r = rows[k];
    const RowPickDev& p = picks[k];
    const lanes::TokenId want = lanes::sample_keyed(r.logits, r.params, r.seed, r.position);
    if (r.params.greedy()) {
      EXPECT_EQ(p.token, want) << "row " << k;
      ++t.argmax;
      continue;
    }
    if (p.irregular) {
      EXPECT_TRUE(has_non_finite(r.logits)) << "row " << k;  // it goes whole
      ++t.irregular;
      continue;
    }
    EXPECT_FALSE(has_non_finite(r.logits)) << "row " << k;
    if (p.count > kDrawCandidates) {
      ++t.too_many;  // it goes whole
      continue;
    }
    std::vector<int32_t> ids;
    std::vector<float> values;
    ASSERT_NO_FATAL_FAILURE(pick_candidates(p, r.logits, k, &ids, &values));
    EXPECT_EQ(lanes::sample_gumbel_candidates(ids, values, r.params, r.seed, r.position), want)
        << "row " << k << " T " << r.params.temperature << " with " << ids.size() << " candidates";
    ++t.decided;
    t.several += ids.size() > 1;
  }
}

TEST(RowDraws, DeviceMatchesHostSamplerOnTheFullVocabulary) {
  Tally t;
  for (uint32_t batch = 0; batch < 6; ++batch) {
    const std::vector<Row> rows = make_rows(kVocab, 84, 100 + batch);
    check_picks(rows, device_picks(rows, kVocab), t);
  }
  std::printf("argmax rows %d, Gumbel rows decided from candidates %d (%d with several), irregular %d, too many %d\n",
              t.argmax, t.decided, t.several, t.irregular, t.too_many);
  EXPECT_GT(t.argmax, 100);
  EXPECT_GT(t.decided, 200);
  EXPECT_GT(t.several, 0);  // the near-tie rows reach the rule's margin
  EXPECT_GT(t.irregular, 0);
}

TEST(RowDraws, SmallAndOddVocabularies) {
  Tally t;
  for (int64_t V : {1, 2, 3, 31, 255, 4096, 4097, 10001}) {
    const std::vector<Row> rows = make_rows(V, 48, static_cast<uint32_t>(V));
    check_picks(rows, device_picks(rows, V), t);
  }
  EXPECT_GT(t.decided, 0);
}

// Truncated rows (top-k, top-p, min-p) of the full vocabulary: realistic logits ~ N(0, 3) and rows of ties, -inf
// runs, quantized logits and NaN / +inf; every parameter kind. Each row the device decides draws sample_keyed's token
// (draw_row without a mask); the rest come whole, and rarely on the realistic rows.
std::vector<Row> truncated_rows(int64_t V, int count, uint32_t salt, bool realistic) {
  std::mt19937 rng(salt);
  const lanes::SamplingParams sets[] = {
      {1.0f, 0, 0.9f, 0.0f},  {0.7f, 0, 0.95f, 0.0f},  {1.0f, 40, 1.0f, 0.0f},  {0.8f, 50, 0.9f, 0.05f},
      {1.0f, 0, 1.0f, 0.05f}, {1.3f, 0, 0.5f, 0.0f},   {1.0f, 1, 1.0f, 0.0f},   {1.0f, 0, 0.999f, 0.0f},
      {1e-7f, 20, 0.9f, 0.0f}, {40.0f, 0, 0.99999994f, 0.0f}, {1.0f, 0, 1e-6f, 0.0f}, {0.9f, 200000, 0.9f, 1.0f}};
  std::vector<Row> rows;
  for (int k = 0; k < count; ++k) {
    Row r;
    r.params = sets[k % std::size(sets)];
    r.seed = (static_cast<uint64_t>(rng()) << 32) | rng();
    r.position = static_cast<int64_t>(rng() % 2000000);
    r.logits.resize(static_cast<size_t>(V));
    std::normal_distribution<float> normal(0.0f, 3.0f);
    for (float& x : r.logits) x = normal(rng);
    if (!realistic) {
      const int shape = (k / static_cast<int>(std::size(sets))) % 5;
      if (shape == 0) std::fill(r.logits.begin(), r.logits.begin() + V / 3, 4.0f);  // a run of ties at the top
      if (shape == 1)
        for (float& x : r.logits) x = std::round(x);                                 // quantized: ties everywhere
      if (shape == 2)
        for (size_t i = 1; i < r.logits.size(); i += 2) r.logits[i] = -kInf;          // masked-like
      if (shape == 3) r.logits[rng() % static_cast<size_t>(V)] = k % 2 ? std::nanf("") : kInf;  // irregular
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

struct TruncatedTally {
  int decided = 0, uncertain = 0, too_many = 0, irregular = 0;
};

void check_truncated(const std::vector<Row>& rows, const std::vector<RowPickDev>& picks, TruncatedTally& t) {
  for (size_t k = 0; k < rows.size(); ++k) {
    const Row& r = rows[k];
    const RowPickDev& p = picks[k];
    if (p.irregular) {
      bool odd = true;  // a NaN or +inf, or no finite logit
      for (float x : r.logits) odd = odd && !(std::isfinite(x));
      for (float x : r.logits) odd = odd || std::isnan(x) || x == kInf;
      EXPECT_TRUE(odd) << "row " << k;
      ++t.irregular;
      continue;
    }
    if (p.uncertain) {
      ++t.uncertain;
      continue;
    }
    if (p.count > kDrawCandidates) {
      ++t.too_many;
      continue;
    }
    std::vector<int32_t> ids;
    std::vector<float> values;
    ASSERT_NO_FATAL_FAILURE(pick_candidates(p, r.logits, k, &ids, &values));
    EXPECT_EQ(lanes::sample_gumbel_candidates(ids, values, r.params, r.seed, r.position),
              lanes::draw_row(r.logits, r.params, r.seed, r.position, nullptr))
        << "row " << k << " T " << r.params.temperature << " top_k " << r.params.top_k << " top_p " << r.params.top_p
        << " min_p " << r.params.min_p << " with " << ids.size() << " candidates";
    ++t.decided;
  }
}

TEST(RowDraws, TruncatedRowsMatchHostSampler) {
  TruncatedTally real, odd;
  for (uint32_t batch = 0; batch < 4; ++batch) {
    const std::vector<Row> rows = truncated_rows(kVocab, 96, 300 + batch, true);
    check_truncated(rows, device_picks(rows, kVocab), real);
  }
  for (uint32_t batch = 0; batch < 2; ++batch) {
    const std::vector<Row> rows = truncated_rows(kVocab, 120, 400 + batch, false);
    check_truncated(rows, device_picks(rows, kVocab), odd);
  }
  std::printf("truncated N(0, 3) rows: decided %d, whole %d (uncertain %d, too many %d, irregular %d)\n", real.decided,
              real.uncertain + real.too_many + real.irregular, real.uncertain, real.too_many, real.irregular);
  std::printf("truncated odd rows: decided %d, whole %d (uncertain %d, too many %d, irregular %d)\n", odd.decided,
              odd.uncertain + odd.too_many + odd.irregular, odd.uncertain, odd.too_many, odd.irregular);
  const int all = 4 * 96;
  EXPECT_EQ(real.irregular, 0);
  EXPECT_LE(real.uncertain + real.too_many, all / 100);
  EXPECT_GT(odd.decided, 0);
  EXPECT_GT(odd.irregular, 0);
}

TEST(RowDraws, TruncatedSmallAndOddVocabularies) {
  TruncatedTally t;
  for (int64_t V : {1, 2, 3, 31, 255, 4096, 4097, 10001}) {
    const std::vector<Row> rows = truncated_rows(V, 60, static_cast<uint32_t>(V) + 7, V % 2 == 0);
    check_truncated(rows, device_picks(rows, V), t);
  }
  std::printf("truncated small rows: decided %d, uncertain %d, too many %d, irregular %d\n", t.decided, t.uncertain,
              t.too_many, t.irregular);
  EXPECT_GT(t.decided, 0);
}

// Logprob parts of every kind of row against the host's functions on the whole row, bit for bit: the first best id's
// logit, the partition sum, log_partition, top_logprobs (n from 1 to 20) and a proposed id's logprob, on rows of the
// real vocabulary (N(0, 3), peaky, ties, NaN, -inf, +inf, a largest logit of -0 and +0, every logit -inf).
TEST(RowDraws, LogprobPartsMatchHost) {
  std::mt19937 rng(51);
  std::vector<Row> rows = make_rows(kVocab, 48, 52);
  for (Row& r : truncated_rows(kVocab, 24, 53, false)) rows.push_back(std::move(r));
  for (Row& r : truncated_rows(kVocab, 12, 54, true)) rows.push_back(std::move(r));
  for (size_t k = 0; k < rows.size(); ++k) {
    Row& r = rows[k];
    if (k % 9 == 4) {  // a largest logit of zero held by -0 and +0, everything else far below
      for (float& x : r.logits) x = std::isfinite(x) ? -std::fabs(x) - 60.0f : x;
      r.logits[rng() % r.logits.size()] = -0.0f;
      r.logits[rng() % r.logits.size()] = 0.0f;
    }
    r.partition = k % 7 != 6;
    r.top_n = k % 5 == 0 ? 0 : 1 + static_cast<int32_t>(rng() % 20);
    r.proposed = k % 4 == 3 ? -1 : static_cast<int32_t>(rng() % kVocab);
  }
  const std::vector<RowPickDev> picks = device_picks(rows, kVocab);
  int finite = 0;
  for (size_t k = 0; k < rows.size(); ++k) {
    const Row& r = rows[k];
    const RowPickDev& p = picks[k];
    const lanes::LogPartition want = lanes::log_partition(r.logits);
    if (r.partition) {
      const lanes::PartitionSum sum{p.sum_lo, p.sum_hi};
      const lanes::LogPartition z = lanes::partition_from(p.top_logit, sum);
      EXPECT_EQ(std::memcmp(&z, &want, sizeof z), 0) << "row " << k;
      if (std::isfinite(want.max)) {
        ++finite;
        EXPECT_EQ(sum, lanes::partition_sum(r.logits, want.max)) << "row " << k;
      }
      const lanes::TokenId a = lanes::sample_keyed(r.logits, {0.0f, 0, 1.0f, 0.0f}, 0, 0);  // the first best id
      const float lp = lanes::logprob_of(p.top_logit, z), lp_want = lanes::token_logprob(r.logits, a);
      EXPECT_EQ(std::memcmp(&lp, &lp_want, 4), 0) << "row " << k;
      if (r.proposed >= 0) {
        const float q = lanes::logprob_of(p.proposed_logit, z), q_want = lanes::token_logprob(r.logits, r.proposed);
        EXPECT_EQ(std::memcmp(&q, &q_want, 4), 0) << "row " << k;
      }
    }
    if (r.top_n > 0) {
      ASSERT_EQ(p.top_count, r.top_n) << "row " << k;
      const std::vector<int32_t> ids(p.top_ids, p.top_ids + p.top_count);
      const std::vector<float> values(p.top_logits, p.top_logits + p.top_count);
      const std::vector<lanes::TokenLogprob> top = lanes::top_logprobs_among(ids, values, r.top_n, want),
                                             top_want = lanes::top_logprobs(r.logits, r.top_n, want);
      ASSERT_EQ(top.size(), top_want.size()) << "row " << k;
      for (size_t i = 0; i < top.size(); ++i) {
        EXPECT_EQ(top[i].token, top_want[i].token) << "row " << k << " rank " << i;
        EXPECT_EQ(std::memcmp(&top[i].logprob, &top_want[i].logprob, 4), 0) << "row " << k << " rank " << i;
      }
    }
  }
  std::printf("logprob parts: %zu rows, %d with a finite partition\n", rows.size(), finite);
  EXPECT_GT(finite, 30);
}

// Rows under token masks (one id, every id, random subsets, small lists; NaN and -inf inside and outside them) of every
// kind: each row the device decides draws draw_row's token (draw_masked), and the logprob parts stay the raw row's.
TEST(RowDraws, MaskedRowsMatchDrawRow) {
  std::mt19937 rng(61);
  std::vector<Row> rows = make_rows(kVocab, 36, 62);
  for (Row& r : truncated_rows(kVocab, 48, 63, true)) rows.push_back(std::move(r));
  for (Row& r : truncated_rows(kVocab, 24, 64, false)) rows.push_back(std::move(r));
  for (size_t k = 0; k < rows.size(); ++k) {
    Row& r = rows[k];
    auto mask = std::make_shared<lanes::TokenMask>(static_cast<int32_t>(kVocab));
    const int kind = static_cast<int>(k % 4);
    if (kind == 0) mask->allow(static_cast<int32_t>(rng() % kVocab));
    if (kind == 1)
      for (int32_t i = 0; i < kVocab; ++i) mask->allow(i);
    if (kind == 2)
      for (int32_t i = 0; i < kVocab; ++i)
        if (rng() % 3 == 0) mask->allow(i);
    if (kind == 3)
      for (int j = 0; j < 40; ++j) mask->allow(static_cast<int32_t>(rng() % kVocab));
    r.mask = mask;
    r.partition = k % 3 == 0;
  }
  const std::vector<RowPickDev> picks = device_picks(rows, kVocab);
  int argmax = 0, decided = 0, whole = 0;
  for (size_t k = 0; k < rows.size(); ++k) {
    const Row& r = rows[k];
    const RowPickDev& p = picks[k];
    const lanes::TokenId want = lanes::draw_row(r.logits, r.params, r.seed, r.position, r.mask.get());
    if (r.partition) {  // the raw row's partition, mask or not
      const lanes::LogPartition z = lanes::partition_from(p.top_logit, lanes::PartitionSum{p.sum_lo, p.sum_hi}),
                                z_want = lanes::log_partition(r.logits);
      EXPECT_EQ(std::memcmp(&z, &z_want, sizeof z), 0) << "row " << k;
    }
    if (r.params.greedy()) {
      EXPECT_EQ(p.token, want) << "row " << k;
      EXPECT_EQ(std::memcmp(&p.logits[0], &r.logits[static_cast<size_t>(want)], 4), 0) << "row " << k;  // its logit
      ++argmax;
      continue;
    }
    if (p.irregular || p.uncertain || p.count <= 0 || p.count > kDrawCandidates) {
      ++whole;
      continue;
    }
    std::vector<std::pair<int32_t, float>> c;
    for (int i = 0; i < p.count; ++i) c.emplace_back(p.ids[i], p.logits[i]);
    std::sort(c.begin(), c.end());
    std::vector<int32_t> ids;
    std::vector<float> values;
    for (auto& [id, v] : c) {
      EXPECT_TRUE(r.mask->contains(id)) << "row " << k << " candidate " << id;
      ids.push_back(id);
      values.push_back(v);
    }
    EXPECT_EQ(lanes::sample_gumbel_candidates(ids, values, r.params, r.seed, r.position), want) << "row " << k;
    ++decided;
  }
  std::printf("masked rows: argmax %d, decided from candidates %d, whole %d\n", argmax, decided, whole);
  EXPECT_GT(argmax, 5);
  EXPECT_GT(decided, 50);
}

// A row's pick is the same launched alone as among others (the exact equality concurrent == solo).
TEST(RowDraws, PickDoesNotDependOnTheBatch) {
  std::vector<Row> rows = make_rows(kVocab, 30, 7);
  for (Row& r : truncated_rows(kVocab, 30, 8, false)) rows.push_back(std::move(r));
  const std::vector<RowPickDev> together = device_picks(rows, kVocab);
  for (size_t k = 0; k < rows.size(); k += 3) {
    const std::vector<RowPickDev> alone = device_picks({rows[k]}, kVocab);
    EXPECT_EQ(alone[0].token, together[k].token) << k;
    EXPECT_EQ(alone[0].irregular, together[k].irregular) << k;
    EXPECT_EQ(alone[0].uncertain, together[k].uncertain) << k;
    ASSERT_EQ(alone[0].count, together[k].count) << k;
    if (alone[0].count > kDrawCandidates) continue;  // which ids fill the slots then depends on timing: it goes whole
    std::set<int32_t> a, b;
    for (int i = 0; i < alone[0].count; ++i) a.insert(alone[0].ids[i]);
    for (int i = 0; i < together[k].count; ++i) b.insert(together[k].ids[i]);
    EXPECT_EQ(a, b) << k;
  }
}

// The lane adapter over the CUDA forward: reductions on (with whole rows on several threads) == every row whole.
TEST(RowDraws, LaneBackendSameTokensAsWholeRows) {
  static const std::shared_ptr<const ModelDevice> model = gpu_testing::upload(gpu_testing::chosen_preset_weights(1));
  ASSERT_TRUE(model);
  auto make = [&](bool reduce) {
    ForwardOptions o;
    o.max_context = 1024;
    o.max_rollback = 16;
    o.max_call_rows = 256;
    auto f = Forward::create(model, o);
    EXPECT_TRUE(f.ok()) << f.status().to_string();
    engine::LaneBackendOptions lo;
    lo.model_id = "gpu-test";
    lo.reduce_rows = reduce;
    lo.draw_threads = reduce ? 4 : 1;
    auto b = engine::LaneBackend::create(cuda_stream_forward(std::move(*f)), 16, lo);
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    return std::move(*b);
  };
  auto whole = make(false), reduced = make(true);
  const lanes::SamplingParams kinds[] = {{0.0f, 0, 1.0f, 0.0f}, {0.8f, 0, 1.0f, 0.0f}, {1.5f, 0, 1.0f, 0.0f},
                                         {1e-7f, 0, 1.0f, 0.0f}, {0.8f, 0, 0.9f, 0.0f}, {0.8f, 40, 1.0f, 0.0f},
                                         {0.0f, 0, 1.0f, 0.0f}};  // the last one asks logprobs
  const size_t n = std::size(kinds);
  std::vector<int64_t> rows(n);
  std::vector<int32_t> pending(n);
  for (size_t k = 0; k < n; ++k) {
    lanes::StreamSpec spec{kinds[k], 77 + k, 400};
    const std::vector<int32_t> p = gpu_testing::prompt(20 + static_cast<int>(k), static_cast<int>(k));
    for (engine::LaneBackend* b : {whole.get(), reduced.get()}) {
      ASSERT_TRUE(b->open(k + 1, spec).ok());
      lanes::Piece piece{k + 1, 0, {p.data(), p.size() - 1}};
      ASSERT_TRUE(b->prefill({&piece, 1}).ok());
    }
    rows[k] = static_cast<int64_t>(p.size()) - 1;
    pending[k] = p.back();
  }
  for (int round = 0; round < 12; ++round) {
    std::vector<lanes::Window> windows;
    for (size_t k = 0; k < n; ++k) {
      lanes::Window w{k + 1, rows[k], {pending[k]}, k + 1 == n || k % 2 == 1, k % 3 == 0 ? 5 : 0};
      if (round % 3 == 1) {
        for (int32_t t : gpu_testing::prompt(2, round * 7 + static_cast<int>(k))) w.tokens.push_back(t);
      }
      if (k % 2 == 0 && round % 2 == 0) {  // the pending row under a token mask
        auto mask = std::make_shared<lanes::TokenMask>(whole->info().vocab_size);
        for (int32_t t : gpu_testing::prompt(60, round * 13 + static_cast<int>(k))) mask->allow(t);
        w.allowed.assign(w.tokens.size(), nullptr);
        w.allowed[0] = mask;
      }
      windows.push_back(std::move(w));
    }
    std::vector<std::vector<lanes::RowResult>> a, b;
    ASSERT_TRUE(whole->verify(windows, &a).ok());
    ASSERT_TRUE(reduced->verify(windows, &b).ok());
    for (size_t k = 0; k < n; ++k) {
      ASSERT_EQ(b[k].size(), a[k].size());
      for (size_t i = 0; i < a[k].size(); ++i) {
        EXPECT_EQ(b[k][i].token, a[k][i].token) << "round " << round << " stream " << k << " row " << i;
        EXPECT_EQ(std::memcmp(&b[k][i].logprob, &a[k][i].logprob, 4), 0);
        EXPECT_EQ(std::memcmp(&b[k][i].proposed_logprob, &a[k][i].proposed_logprob, 4), 0);
        ASSERT_EQ(b[k][i].top.size(), a[k][i].top.size());
        for (size_t j = 0; j < a[k][i].top.size(); ++j) {
          EXPECT_EQ(b[k][i].top[j].token, a[k][i].top[j].token);
          EXPECT_EQ(std::memcmp(&b[k][i].top[j].logprob, &a[k][i].top[j].logprob, 4), 0);
        }
      }
      rows[k] += 1;
      pending[k] = a[k][0].token;
      ASSERT_TRUE(whole->keep(k + 1, rows[k]).ok());
      ASSERT_TRUE(reduced->keep(k + 1, rows[k]).ok());
    }
  }
}

}  // namespace
}  // namespace dsv4::cuda
