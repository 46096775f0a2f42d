// Lane host scheduling with exact expectations: admission order, head-of-line memory, refusals, fairness, drain.
#include <gtest/gtest.h>

#include "lanes/lane_host.h"
#include "lanes/test_support.h"

namespace dsv4::lanes {
namespace {

using testing::Collector;

// A one-token prompt decodes at once; ignore_eos and no drafts make every request take exactly max_tokens rounds.
Request short_request(TokenId first, int32_t max_tokens, Priority priority = Priority::foreground) {
  Request r;
  r.prompt = {first};
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.draft = false;
  r.priority = priority;
  return r;
}

std::vector<StreamId> opened(const FakeBackend& fake) {
  std::vector<StreamId> out;
  for (const FakeCall& c : fake.calls()) {
    if (c.kind == FakeCall::Kind::open) out.push_back(c.streams[0].first);
  }
  return out;
}

std::vector<std::vector<StreamId>> verify_batches(const FakeBackend& fake) {
  std::vector<std::vector<StreamId>> out;
  for (const FakeCall& c : fake.calls()) {
    if (c.kind != FakeCall::Kind::verify) continue;
    out.emplace_back();
    for (auto [sid, rows] : c.streams) out.back().push_back(sid);
  }
  return out;
}

TEST(Scheduling, ForegroundBeforeBackgroundEachFifo) {
  FakeBackendOptions fo;
  fo.max_streams = 2;
  FakeBackend fake(fo);
  LaneHost host(fake, {});
  auto sink = std::make_shared<Collector>();
  const RequestId a = *host.submit(short_request(1, 3), sink);
  const RequestId b = *host.submit(short_request(2, 3, Priority::background), sink);
  const RequestId c = *host.submit(short_request(3, 3), sink);
  const RequestId d = *host.submit(short_request(4, 3), sink);
  for (int i = 0; i < 3; ++i) host.step();
  // Rounds 1-3: A and C (the two foreground heads) run their 3 tokens each; B and D wait for slots.
  EXPECT_EQ(sink->finish_order(), (std::vector<RequestId>{a, c}));
  EXPECT_EQ(host.status().queued, 2);
  host.run_until_idle();
  EXPECT_EQ(sink->finish_order(), (std::vector<RequestId>{a, c, d, b}));
  EXPECT_EQ(opened(fake), (std::vector<StreamId>{1, 2, 3, 4}));  // A, C, D, B in admission order
}

TEST(Scheduling, MemoryHeadOfLineWaits) {
  FakeBackendOptions fo;
  fo.bytes_per_row = 1;
  fo.memory_budget_bytes = 100;
  FakeBackend fake(fo);
  LaneHost host(fake, {});
  auto sink = std::make_shared<Collector>();
  // stream_bytes = prompt + max_tokens: 61, then 60 (does not fit beside 61), then 10 (would fit, but waits).
  const RequestId a = *host.submit(short_request(1, 60), sink);
  const RequestId b = *host.submit(short_request(2, 59), sink);
  const RequestId c = *host.submit(short_request(3, 9), sink);
  host.step();
  EXPECT_EQ(host.status().running, 1);
  EXPECT_EQ(host.status().queued, 2);
  for (int i = 1; i < 60; ++i) host.step();  // A's 60th token lands in round 60
  EXPECT_EQ(sink->finish_order(), (std::vector<RequestId>{a}));
  host.step();  // B (60) and C (10) now fit together: 70 <= 100
  EXPECT_EQ(host.status().running, 2);
  host.run_until_idle();
  EXPECT_EQ(sink->finish_order(), (std::vector<RequestId>{a, c, b}));
}

TEST(Scheduling, RefusesWhatCanNeverRun) {
  FakeBackendOptions fo;
  fo.max_context = 100;
  fo.bytes_per_row = 10;
  fo.memory_budget_bytes = 500;
  FakeBackend fake(fo);
  LaneHost host(fake, {});
  auto sink = std::make_shared<Collector>();
  Request empty;
  EXPECT_EQ(host.submit(empty, sink).status().code(), StatusCode::invalid_argument);
  Request long_prompt = short_request(1, 5);
  long_prompt.prompt.assign(100, 1);
  StatusOr<RequestId> refused = host.submit(long_prompt, sink);
  EXPECT_EQ(refused.status().message(), "a prompt of 100 tokens leaves no room in the context of 100");
  refused = host.submit(short_request(1, 50), sink);  // 51 positions * 10 bytes > 500
  EXPECT_EQ(refused.status().code(), StatusCode::resource_exhausted);
  EXPECT_EQ(refused.status().message(),
            "a request of 51 positions needs 510 bytes of stream memory; the backend has 500 in all");
  Request bad = short_request(61, 5);  // vocab is 61
  EXPECT_EQ(host.submit(bad, sink).status().message(), "prompt[0] = 61 is outside the vocabulary [0, 61)");
  Request strings = short_request(1, 5);
  strings.stop_strings = {"x"};
  EXPECT_EQ(host.submit(strings, sink).status().code(), StatusCode::invalid_argument);
  EXPECT_TRUE(host.submit(short_request(1, 49), sink).ok());  // 50 * 10 = 500 fits exactly
}

TEST(Scheduling, LeastRecentlyServedTakesTurns) {
  FakeBackend fake({});
  LaneHost host(fake, LaneHostOptions{.max_batch_streams = 2});
  auto sink = std::make_shared<Collector>();
  for (TokenId t = 1; t <= 5; ++t) (void)host.submit(short_request(t, 3), sink);
  host.run_until_idle();
  // Five streams of 3 tokens, two windows per verify: each round serves the two least recently served, ties
  // by admission. Last-served rounds (never = -1): r0 {1,2}; r1 {3,4}; r2 5(-1), 1(0) before 2(0); r3 2(0),
  // 3(1) before 4(1); r4 4(1), then 1(2) before 5(2) -> 1 done; r5 5(2), 2(3) -> 2 done; r6 3(3), 4(4) -> done;
  // r7 5 -> done.
  const std::vector<std::vector<StreamId>> expected = {{1, 2}, {3, 4}, {5, 1}, {2, 3}, {4, 1},
                                                       {5, 2}, {3, 4}, {5}};
  EXPECT_EQ(verify_batches(fake), expected);
}

TEST(Scheduling, RowBudgetDefersWholeWindows) {
  FakeBackendOptions fo;
  fo.max_verify_rows = 5;
  FakeBackend fake(fo);
  LaneHost host(fake, {});
  auto sink = std::make_shared<Collector>();
  // Forced windows have a known width: 1 pending row + forced tokens (capped by the 5-row budget).
  Request a = short_request(1, 3);
  a.forced_tokens = {7, 8, 9};  // 4 rows, then done
  Request b = short_request(2, 2);
  b.forced_tokens = {7};        // 2 rows, then a 1-row window
  (void)host.submit(a, sink);
  (void)host.submit(b, sink);
  host.run_until_idle();
  // Round 1: A's 4 rows fit, B's 2 do not (4 + 2 > 5): B waits and goes first in round 2.
  std::vector<std::pair<StreamId, int64_t>> rows;
  for (const FakeCall& c : fake.calls()) {
    if (c.kind == FakeCall::Kind::verify) rows.insert(rows.end(), c.streams.begin(), c.streams.end());
  }
  EXPECT_EQ(rows, (std::vector<std::pair<StreamId, int64_t>>{{1, 4}, {2, 2}}));
}

TEST(Scheduling, DrainHaltsAtTheFirstRoundPastTheDeadline) {
  ManualClock clock;
  FakeBackendOptions fo;
  fo.clock = &clock;
  fo.call_ns = 1'000'000;  // every call costs exactly 1 ms
  fo.row_ns = 0;
  FakeBackend fake(fo);
  LaneHost host(fake, LaneHostOptions{.clock = &clock});
  auto sink = std::make_shared<Collector>();
  const RequestId a = *host.submit(short_request(1, 100), sink);
  const RequestId b = *host.submit(short_request(2, 3), sink);
  Request c = short_request(3, 100);  // arrives after the drain began: refused
  host.begin_drain(std::chrono::milliseconds(5));
  EXPECT_EQ(host.submit(c, sink).status().code(), StatusCode::unavailable);
  // Rounds start at t = 0, 1, 2, 3, 4 ms (one verify each); the round at t = 5 ms halts.
  Status drained = host.drain(std::chrono::milliseconds(5));
  EXPECT_EQ(drained.message(), "drain deadline passed: 1 requests halted");
  EXPECT_EQ(clock.now_ns(), 5'000'000);
  testing::Outcome oa = sink->get(a), ob = sink->get(b);
  EXPECT_EQ(oa.tokens.size(), 5u);
  EXPECT_EQ(oa.finish.reason, FinishReason::error);
  EXPECT_EQ(oa.finish.message, "halted: drain deadline passed");
  EXPECT_EQ(ob.tokens.size(), 3u);
  EXPECT_EQ(ob.finish.reason, FinishReason::length);
  EXPECT_TRUE(host.status().halted);
  EXPECT_EQ(fake.open_streams(), 0);
}

TEST(Scheduling, ThreadedEngineServesAndDrains) {
  FakeBackendOptions fo;
  fo.max_streams = 4;
  FakeBackend fake(fo);
  LaneHost host(fake, {});
  auto sink = std::make_shared<Collector>();
  host.start();
  std::vector<std::pair<RequestId, Request>> submitted;
  for (uint64_t i = 0; i < 10; ++i) {
    Request r;
    r.prompt.assign(1 + i * 13, static_cast<TokenId>(1 + i));
    r.sampling.temperature = i % 2 ? 1.0f : 0.0f;
    r.max_tokens = 20;
    submitted.push_back({*host.submit(r, sink), r});
  }
  EXPECT_TRUE(host.drain(std::chrono::milliseconds(60'000)).ok());
  for (const auto& [id, r] : submitted) {
    EXPECT_EQ(sink->get(id).tokens, testing::serial_reference(fake, r));
    EXPECT_EQ(sink->get(id).finish_count, 1);
  }
  host.stop();
}

}  // namespace
}  // namespace dsv4::lanes

namespace dsv4::lanes {
namespace {

TEST(Scheduling, DecodingContinuesWhileAPromptFills) {
  FakeBackend fake({});
  LaneHost host(fake, LaneHostOptions{.prefill_rows = 16});
  auto sink = std::make_shared<Collector>();
  const RequestId a = *host.submit(short_request(1, 50), sink);
  host.step();  // A decodes its first token
  Request b = short_request(2, 5);
  b.prompt.assign(100, 2);  // 99 prompt rows: pieces 16 x 6 and 3
  const RequestId bid = *host.submit(b, sink);
  fake.clear_calls();
  for (int round = 0; round < 7; ++round) host.step();
  // Every round is one step: a prefill piece of B with a window of A (FakeBackend runs a step as prefill then
  // verify); B's first window comes the round after its last piece.
  std::vector<FakeCall::Kind> kinds;
  for (const FakeCall& c : fake.calls()) {
    if (c.kind == FakeCall::Kind::prefill || c.kind == FakeCall::Kind::verify) kinds.push_back(c.kind);
  }
  std::vector<FakeCall::Kind> expected;
  for (int round = 0; round < 7; ++round) {
    expected.push_back(FakeCall::Kind::prefill);
    expected.push_back(FakeCall::Kind::verify);
  }
  EXPECT_EQ(kinds, expected);
  EXPECT_EQ(sink->get(a).tokens.size(), 8u);
  EXPECT_EQ(sink->get(bid).prefill_rows, (std::vector<int64_t>{16, 32, 48, 64, 80, 96, 99}));
  EXPECT_EQ(sink->get(bid).tokens.size(), 0u);
  host.step();
  EXPECT_EQ(sink->get(bid).tokens.size(), 1u);  // its first token: the round after its prompt finished
  EXPECT_EQ(sink->get(a).tokens.size(), 9u);
}

TEST(Scheduling, CancelBetweenPromptPieces) {
  FakeBackend fake({});
  LaneHost host(fake, LaneHostOptions{.prefill_rows = 16});
  auto sink = std::make_shared<Collector>();
  Request r = short_request(2, 5);
  r.prompt.assign(300, 2);
  const RequestId id = *host.submit(r, sink);
  for (int i = 0; i < 3; ++i) host.step();
  host.cancel(id);
  host.run_until_idle();
  testing::Outcome o = sink->get(id);
  EXPECT_EQ(o.prefill_rows, (std::vector<int64_t>{16, 32, 48}));
  EXPECT_TRUE(o.tokens.empty());
  EXPECT_EQ(o.finish.reason, FinishReason::cancelled);
  EXPECT_EQ(o.finish_count, 1);
  EXPECT_EQ(fake.open_streams(), 0);
}

}  // namespace
}  // namespace dsv4::lanes
