// Request::n > 1 on the fake backend: member i equals a solo request with seed member_seed(seed, i) (tokens and
// logprobs), the prompt's rows are prefilled once (counted in the fake's call log), cancel ends every member.
#include <gtest/gtest.h>

#include "lanes/fanout.h"
#include "lanes/lane_host.h"
#include "lanes/test_support.h"

namespace dsv4::lanes {
namespace {

using testing::Collector;

Request sampled_request(int64_t length, int32_t max_tokens, bool draft) {
  Request r;
  for (int64_t i = 0; i < length; ++i) r.prompt.push_back(1 + static_cast<TokenId>((i * 31 + 7) % 60));
  r.sampling = SamplingParams{1.0f, 0, 1.0f, 0.0f};
  r.seed = 99;
  r.max_tokens = max_tokens;
  r.draft = draft;
  r.logprobs = true;
  r.top_logprobs = 2;
  return r;
}

testing::Outcome solo(const Request& r, FakeBackendOptions options) {
  FakeBackend fake(options);
  LaneHost host(fake, {});
  auto sink = std::make_shared<Collector>();
  StatusOr<RequestId> id = host.submit(r, sink);
  EXPECT_TRUE(id.ok());
  host.run_until_idle();
  return sink->get(*id);
}

int64_t prefill_rows(const FakeBackend& fake) {
  int64_t rows = 0;
  for (const FakeCall& c : fake.calls())
    if (c.kind == FakeCall::Kind::prefill)
      for (auto [sid, n] : c.streams) rows += n;
  return rows;
}

TEST(Fanout, MemberSeedKeepsChoiceZero) {
  EXPECT_EQ(member_seed(1234, 0), 1234u);
  EXPECT_EQ(member_seed(1234, 2), splitmix64_nth(1234, 2));
  EXPECT_NE(member_seed(1234, 1), member_seed(1234, 2));
}

TEST(Fanout, EachChoiceEqualsTheSoloRequestWithItsSeedAndThePromptIsFilledOnce) {
  for (bool split : {true, false}) {
    for (bool draft : {false, true}) {
      for (int64_t length : {1, 2, 45}) {
        FakeBackendOptions options;
        options.split_snapshots = split;
        FakeBackend fake(options);
        LaneHost host(fake, LaneHostOptions{.prefill_rows = 16});
        auto sink = std::make_shared<Collector>();
        Request r = sampled_request(length, 24, draft);
        r.n = 3;
        StatusOr<RequestId> id = host.submit(r, sink);
        ASSERT_TRUE(id.ok()) << id.status().to_string();
        host.run_until_idle();
        // The prompt's rows (all but its last token) were fed once, not once per choice.
        EXPECT_EQ(prefill_rows(fake), length - 1) << "split " << split << " draft " << draft << " length " << length;
        EXPECT_EQ(fake.open_streams(), 0);
        std::vector<std::vector<TokenId>> outputs;
        for (int32_t i = 0; i < 3; ++i) {
          Request alone = sampled_request(length, 24, draft);
          alone.seed = member_seed(99, i);
          const testing::Outcome want = solo(alone, options);
          const testing::Outcome got = sink->get(*id + static_cast<RequestId>(i));
          EXPECT_EQ(got.tokens, want.tokens) << "choice " << i;
          EXPECT_EQ(got.logprobs, want.logprobs) << "choice " << i;
          EXPECT_EQ(got.finish_count, 1);
          EXPECT_EQ(got.finish.choice, i);
          EXPECT_EQ(got.finish.reason, want.finish.reason);
          EXPECT_EQ(got.finish.usage.prompt_tokens, length);
          outputs.push_back(got.tokens);
        }
        // Different seeds drew different continuations (the test would pass vacuously otherwise).
        EXPECT_NE(outputs[1], outputs[2]);
      }
    }
  }
}

TEST(Fanout, CancelEndsEveryMemberAndAdmissionReservesAllStreams) {
  FakeBackend fake(FakeBackendOptions{.max_streams = 4});
  LaneHost host(fake, {});
  auto sink = std::make_shared<Collector>();
  Request too_many = sampled_request(10, 8, true);
  too_many.n = 5;
  EXPECT_EQ(host.submit(too_many, sink).status().code(), StatusCode::invalid_argument);

  Request r = sampled_request(30, 500, true);
  r.ignore_eos = true;
  r.n = 3;
  StatusOr<RequestId> id = host.submit(r, sink);
  ASSERT_TRUE(id.ok());
  // A second request of two choices waits: only one stream is left.
  Request other = sampled_request(12, 4, true);
  other.n = 2;
  StatusOr<RequestId> id2 = host.submit(other, sink);
  ASSERT_TRUE(id2.ok());
  for (int i = 0; i < 6; ++i) host.step();
  EXPECT_EQ(host.status().running, 3);
  EXPECT_FALSE(sink->get(*id2).finished);
  host.cancel(*id);
  host.run_until_idle();
  for (int32_t i = 0; i < 3; ++i) {
    const testing::Outcome o = sink->get(*id + static_cast<RequestId>(i));
    EXPECT_EQ(o.finish_count, 1);
    EXPECT_EQ(o.finish.reason, FinishReason::cancelled);
  }
  for (int32_t i = 0; i < 2; ++i) EXPECT_EQ(sink->get(*id2 + static_cast<RequestId>(i)).finish_count, 1);
  EXPECT_EQ(fake.open_streams(), 0);
}

}  // namespace
}  // namespace dsv4::lanes
