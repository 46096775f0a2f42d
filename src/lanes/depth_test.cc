// Depth rule: exact choices from hand-computed expected tokens per cost; depth is the same whatever the load.
#include "lanes/depth.h"

#include <gtest/gtest.h>

#include "lanes/lane_host.h"
#include "lanes/test_support.h"

namespace dsv4::lanes {
namespace {

// The fake backend's table: cost(r) = (1000 + 100 r) / 1100.
std::vector<double> fake_costs() {
  std::vector<double> c;
  for (int r = 1; r <= 8; ++r) c.push_back((1000.0 + 100.0 * r) / 1100.0);
  return c;
}

TEST(DepthRule, PriorPicksTheBestRate) {
  // Priors 0.85, 0.75, 0.70, 0.65: expected tokens 1, 1.85, 2.4875, 2.93375, 3.2238125 for d = 0..4;
  // per cost 1, 1.6958, 2.1048, 2.3051, 2.3641 -> d = 4.
  DepthRule rule(4, fake_costs());
  EXPECT_EQ(rule.next_depth(), 4);
}

TEST(DepthRule, RejectionsLowerTheDepth) {
  DepthRule rule(4, fake_costs());
  for (int i = 0; i < 20; ++i) rule.observe(4, 0);
  // Level 1: (0 + 4 * 0.85) / (20 + 4) = 0.141667; levels 2..4 keep their priors.
  EXPECT_DOUBLE_EQ(rule.acceptance(1), 3.4 / 24.0);
  EXPECT_DOUBLE_EQ(rule.acceptance(2), 0.75);
  // Rates for d = 0..4: 1, 1.0465, 1.0559, 1.0389, 1.0051 -> d = 2.
  EXPECT_EQ(rule.next_depth(), 2);
}

TEST(DepthRule, LevelsCountOnlyWhenReached) {
  DepthRule rule(4, fake_costs());
  rule.observe(3, 1);  // level 1 accepted, level 2 rejected, level 3 never reached
  EXPECT_DOUBLE_EQ(rule.acceptance(1), (1 + 3.4) / 5.0);
  EXPECT_DOUBLE_EQ(rule.acceptance(2), (0 + 3.0) / 5.0);
  EXPECT_DOUBLE_EQ(rule.acceptance(3), 0.70);
}

TEST(DepthRule, ExpensiveWindowsDraftOnlyToProbe) {
  // cost(r) = r: 1.85 / 2 < 1, so depth 0, except every 8th decision probes depth 1.
  const std::vector<double> linear = {1, 2, 3, 4, 5};
  DepthRule rule(4, linear);
  std::vector<int32_t> depths;
  for (int i = 0; i < 16; ++i) depths.push_back(rule.next_depth());
  EXPECT_EQ(depths, (std::vector<int32_t>{0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1}));
}

// The draft depths one stream asked for, in order.
std::vector<int64_t> depths_of(const FakeBackend& fake, StreamId sid) {
  std::vector<int64_t> out;
  for (const FakeCall& c : fake.calls()) {
    if (c.kind != FakeCall::Kind::draft) continue;
    for (auto [s, depth] : c.streams) {
      if (s == sid) out.push_back(depth);
    }
  }
  return out;
}

TEST(DepthRule, SameDepthsAloneAndUnderLoad) {
  Request r;
  r.prompt = {3, 1, 4, 1, 5, 9, 2, 6};
  r.sampling.temperature = 0.8f;
  r.max_tokens = 80;
  r.ignore_eos = true;
  FakeBackend alone_fake({});
  LaneHost alone(alone_fake, {});
  auto sink = std::make_shared<testing::Collector>();
  (void)alone.submit(r, sink);
  alone.run_until_idle();

  FakeBackendOptions busy;
  busy.max_verify_rows = 9;  // windows get deferred by the row budget
  FakeBackend loaded_fake(busy);
  LaneHost loaded(loaded_fake, LaneHostOptions{.max_batch_streams = 2});
  (void)loaded.submit(r, sink);  // stream 1 in both runs
  for (int i = 0; i < 5; ++i) {
    Request other = r;
    other.prompt.push_back(10 + i);
    other.sampling.temperature = 0.3f * i;
    (void)loaded.submit(other, sink);
  }
  loaded.run_until_idle();
  const std::vector<int64_t> solo = depths_of(alone_fake, 1);
  EXPECT_GT(solo.size(), 10u);
  EXPECT_EQ(depths_of(loaded_fake, 1), solo);
}

}  // namespace
}  // namespace dsv4::lanes
