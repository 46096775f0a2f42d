// The lane adapter's reduced rows (argmax, Gumbel and truncated candidates decided on the host, logprobs derived from
// the partition sum and best ids) against whole rows: the same tokens and logprobs for every kind of stream in one step, with the candidate rules' logarithm and exponential
// a few ulps off, with reductions that come back whole, and with the whole rows drawn on several threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backends/cpu/oracle_forward.h"
#include "family/deepseek_v41/synthetic_weights.h"
#include "engine/reduced_rows_testing.h"

namespace dsv4::cpu {
namespace {

const std::shared_ptr<const family::Model>& weights() {
  static std::shared_ptr<const family::Model> w = family::synthetic_weights(family::small_test_config(), 7, true);
  return w;
}

OracleOptions oracle_options() {
  OracleOptions o;
  o.threads = 2;
  o.max_rollback = 16;
  return o;
}

double log_up(double x) { return std::nextafter(std::log(x), INFINITY); }
double exp_up(double x) { return std::nextafter(std::exp(x), INFINITY); }
double log_noisy(double x) {
  uint64_t bits;
  std::memcpy(&bits, &x, 8);
  const double l = std::log(x);
  return bits % 3 == 0 ? std::nextafter(l, -INFINITY) : bits % 3 == 1 ? std::nextafter(l, INFINITY) : l;
}

struct Reduced {
  std::unique_ptr<engine::LaneBackend> backend;
  engine::HostReducedForward* forward = nullptr;
};

Reduced reduced_backend(double (*log)(double), int whole_every, int32_t draw_threads, double (*exp)(double) = nullptr) {
  auto o = Oracle::create(weights(), oracle_options());
  EXPECT_TRUE(o.ok()) << o.status().to_string();
  auto f = std::make_unique<engine::HostReducedForward>(oracle_stream_forward(std::move(o).value()), log, whole_every,
                                                        exp);
  Reduced r;
  r.forward = f.get();
  engine::LaneBackendOptions options;
  options.model_id = "test-synthetic";
  options.max_streams = 32;  // one stream of each kind
  options.draw_threads = draw_threads;
  auto b = engine::LaneBackend::create(std::move(f), oracle_options().max_rollback, options);
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  r.backend = std::move(b).value();
  return r;
}

std::unique_ptr<engine::LaneBackend> whole_backend() {
  engine::LaneBackendOptions options;
  options.model_id = "test-synthetic";
  options.max_streams = 32;  // one stream of each kind
  options.reduce_rows = false;
  options.draw_threads = 1;
  auto b = oracle_lane_backend(weights(), oracle_options(), options);
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  return std::move(b).value();
}

std::vector<int32_t> toks(int n, uint32_t seed) {
  std::vector<int32_t> t(n);
  for (auto& x : t) {
    seed = seed * 1664525u + 1013904223u;
    x = static_cast<int32_t>((seed >> 8) % 512);
  }
  return t;
}

// Streams of every kind: greedy, plain keyed sampling and truncated sampling (top-p, top-k, min-p), with and without
// logprobs and top_logprobs and token masks (all reduced).
struct Kind {
  lanes::SamplingParams sampling;
  bool logprobs = false;
  int32_t top = 0;
  bool masked = false;
};
const Kind kKinds[] = {
    {{0.0f, 0, 1.0f, 0.0f}},        {{0.8f, 0, 1.0f, 0.0f}},       {{1.7f, 0, 1.0f, 0.0f}},
    {{1e-7f, 0, 1.0f, 0.0f}},       {{0.8f, 0, 0.9f, 0.0f}},       {{0.8f, 20, 1.0f, 0.0f}},
    {{0.8f, 0, 1.0f, 0.05f}},       {{0.0f, 0, 1.0f, 0.0f}, true, 2}, {{0.8f, 0, 1.0f, 0.0f}, false, 3},
    {{1.1f, 40, 0.95f, 0.02f}},     {{0.6f, 1, 1.0f, 0.0f}},       {{1.0f, 0, 0.5f, 0.0f}},
    {{0.9f, 0, 0.9f, 0.0f}, true, 20}, {{0.0f, 0, 1.0f, 0.0f}, false, 1},
    {{0.9f, 5, 0.9f, 0.0f}, true, 2, true}, {{0.7f, 0, 1.0f, 0.1f}, false, 0, true},
    {{0.0f, 0, 1.0f, 0.0f}, true, 3, true},  {{0.8f, 0, 1.0f, 0.0f}, true, 0, true},
    {{0.8f, 0, 1.0f, 0.0f}, false, 0, true}, {{0.0f, 0, 1.0f, 0.0f}, false, 0, true},
};

// Decoding rounds over one stream of each kind on both backends (all windows in one step): every row's results equal.
void expect_same_rounds(lanes::Backend& whole, engine::LaneBackend& reduced) {
  const size_t n = std::size(kKinds);
  std::vector<int64_t> rows(n);
  std::vector<int32_t> pending(n);
  for (size_t k = 0; k < n; ++k) {
    lanes::StreamSpec spec;
    spec.sampling = kKinds[k].sampling;
    spec.seed = 1000 + k;
    spec.max_rows = 100;
    const std::vector<int32_t> prompt = toks(9 + static_cast<int>(k), static_cast<uint32_t>(k));
    for (lanes::Backend* b : {static_cast<lanes::Backend*>(&whole), static_cast<lanes::Backend*>(&reduced)}) {
      ASSERT_TRUE(b->open(k + 1, spec).ok());
      lanes::Piece p{k + 1, 0, {prompt.data(), prompt.size() - 1}};
      ASSERT_TRUE(b->prefill({&p, 1}).ok());
    }
    rows[k] = static_cast<int64_t>(prompt.size()) - 1;
    pending[k] = prompt.back();
  }
  for (int round = 0; round < 5; ++round) {
    std::vector<lanes::Window> windows;
    for (size_t k = 0; k < n; ++k) {
      lanes::Window w;
      w.stream = k + 1;
      w.start = rows[k];
      w.tokens = {pending[k]};
      for (int32_t t : toks(round % 3, static_cast<uint32_t>(round * 31 + k))) w.tokens.push_back(t);  // proposals
      w.logprobs = kKinds[k].logprobs;
      w.top_logprobs = kKinds[k].top;
      if (kKinds[k].masked) {
        auto mask = std::make_shared<lanes::TokenMask>(whole.info().vocab_size);
        for (int32_t t : toks(40, static_cast<uint32_t>(round + 7 * k))) mask->allow(t);
        w.allowed.assign(w.tokens.size(), nullptr);
        w.allowed[0] = mask;  // the other rows draw from the whole row
      }
      windows.push_back(std::move(w));
    }
    std::vector<std::vector<lanes::RowResult>> a, b;
    ASSERT_TRUE(whole.verify(windows, &a).ok());
    ASSERT_TRUE(reduced.verify(windows, &b).ok());
    ASSERT_EQ(a.size(), n);
    ASSERT_EQ(b.size(), n);
    for (size_t k = 0; k < n; ++k) {
      ASSERT_EQ(a[k].size(), windows[k].tokens.size());
      ASSERT_EQ(b[k].size(), a[k].size());
      for (size_t i = 0; i < a[k].size(); ++i) {
        EXPECT_EQ(b[k][i].token, a[k][i].token) << "round " << round << " stream " << k << " row " << i;
        EXPECT_EQ(b[k][i].logprob, a[k][i].logprob);
        EXPECT_EQ(b[k][i].proposed_logprob, a[k][i].proposed_logprob);
        ASSERT_EQ(b[k][i].top.size(), a[k][i].top.size());
        for (size_t j = 0; j < a[k][i].top.size(); ++j) {
          EXPECT_EQ(b[k][i].top[j].token, a[k][i].top[j].token);
          EXPECT_EQ(b[k][i].top[j].logprob, a[k][i].top[j].logprob);
        }
      }
      // Accept the first draw: keep the pending row, the draw is the next pending token.
      rows[k] += 1;
      pending[k] = a[k][0].token;
      ASSERT_TRUE(whole.keep(k + 1, rows[k]).ok());
      ASSERT_TRUE(reduced.keep(k + 1, rows[k]).ok());
    }
  }
}

TEST(ReducedRows, SameDrawsAsWholeRows) {
  auto whole = whole_backend();
  Reduced r = reduced_backend(nullptr, 0, 1);
  expect_same_rounds(*whole, *r.backend);
  // Greedy, plain keyed and truncated rows were reduced, masked ones too.
  EXPECT_GT(r.forward->counts().argmax, 0);
  EXPECT_GT(r.forward->counts().gumbel, 0);
  EXPECT_GT(r.forward->counts().truncated, 0);
  EXPECT_GT(r.forward->counts().masked, 0);
  EXPECT_EQ(r.forward->counts().whole, 0);
}

TEST(ReducedRows, LogarithmsOffByUlpsAndWholeFallbacks) {
  for (auto* log : {log_up, log_noisy}) {
    auto whole = whole_backend();
    Reduced r = reduced_backend(log, 3, 3, exp_up);
    expect_same_rounds(*whole, *r.backend);
    EXPECT_GT(r.forward->counts().gumbel, 0);
    EXPECT_GT(r.forward->counts().truncated, 0);
    EXPECT_GT(r.forward->counts().whole, 0);
  }
}

TEST(ReducedRows, WholeRowsOnSeveralThreads) {
  auto whole = whole_backend();
  engine::LaneBackendOptions options;
  options.model_id = "test-synthetic";
  options.max_streams = 32;  // one stream of each kind
  options.draw_threads = 4;
  auto threaded = oracle_lane_backend(weights(), oracle_options(), options);
  ASSERT_TRUE(threaded.ok());
  expect_same_rounds(*whole, **threaded);
}

}  // namespace
}  // namespace dsv4::cpu
