// Rank 0 plans, every rank runs the same calls: replicated ranks equal one rank bit for bit, a refusal on
// one rank ends that request everywhere and serving continues, the stop lands on the same plan everywhere,
// and ranks that compute different results end with kExitDiverged.
#include <gtest/gtest.h>

#include "cache/prompt_cache.h"
#include "fabric/fabric_test_support.h"
#include "fabric/follower.h"
#include "fabric/leader.h"
#include "fabric/plan.h"
#include "lanes/fake_backend.h"
#include "lanes/lane_host.h"
#include "lanes/test_support.h"

namespace dsv4::fabric {
namespace {
using lanes::FakeBackend;
using lanes::FakeBackendOptions;
using lanes::Request;
using lanes::testing::Collector;

Request request_of(uint64_t salt, int32_t max_tokens, bool sampled) {
  Request r;
  for (int i = 0; i < 9 + static_cast<int>(salt % 5); ++i)
    r.prompt.push_back(2 + static_cast<lanes::TokenId>(lanes::splitmix64_nth(salt, i + 1) % 50));
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  if (sampled) {
    r.sampling.temperature = 0.8f;
    r.seed = 100 + salt;
  }
  return r;
}

FakeBackendOptions fake_options() {
  FakeBackendOptions o;
  o.max_prefill_rows = 4;  // prompts arrive in several pieces
  return o;
}

// A fabric of `world` ranks on fake backends; rank 0's lane host runs `requests`. Returns each request's
// collected outcome and every rank's counters.
struct Served {
  std::vector<lanes::testing::Outcome> outcomes;
  std::vector<FabricCounters> counters;
  std::vector<int> codes;  // each rank's fatal code (-1: none)
};

Served serve(int32_t world, const std::vector<Request>& requests, FollowerOptions follower_options = {},
             float rank2_logit_scale = 8.0f) {
  testing::Fabric f = testing::make_fabric(world);
  Served out;
  out.counters.resize(static_cast<size_t>(world));
  std::vector<std::thread> followers;
  for (int32_t r = 1; r < world; ++r) {
    followers.emplace_back([&, r] {
      FakeBackendOptions o = fake_options();
      if (r == 2) o.logit_scale = rank2_logit_scale;
      FakeBackend backend(o);
      FollowerResult res = run_follower(*f.controls[static_cast<size_t>(r)], backend,
                                        r == 1 ? follower_options : FollowerOptions{});
      out.counters[static_cast<size_t>(r)] = res.counters;
    });
  }
  {
    FakeBackend local(fake_options());
    LeaderBackend leader(*f.controls[0], local);
    lanes::LaneHost host(leader, lanes::LaneHostOptions{});
    auto sink = std::make_shared<Collector>();
    std::vector<lanes::RequestId> ids;
    for (const Request& r : requests) ids.push_back(host.submit(r, sink).value());
    host.run_until_idle();
    for (lanes::RequestId id : ids) out.outcomes.push_back(sink->get(id));
    if (!f.controls[0]->failed()) EXPECT_TRUE(leader.stop().ok());
    out.counters[0] = leader.counters();
  }
  if (f.controls[0]->failed()) f.controls[0]->close();
  for (auto& t : followers) t.join();
  for (auto& fatal : f.fatals) out.codes.push_back(fatal->get_code());
  return out;
}

TEST(Leader, ReplicatedRanksEqualOneRankAndTheSerialReference) {
  std::vector<Request> requests;
  for (uint64_t s = 0; s < 5; ++s) requests.push_back(request_of(s, 12 + static_cast<int32_t>(s), s % 2 == 1));
  Served one = serve(1, requests);
  Served three = serve(3, requests);
  FakeBackend reference(fake_options());
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(three.outcomes[i].tokens, one.outcomes[i].tokens) << "request " << i;
    EXPECT_EQ(three.outcomes[i].tokens, lanes::testing::serial_reference(reference, requests[i])) << "request " << i;
    EXPECT_EQ(three.outcomes[i].finish.reason, lanes::FinishReason::length);
  }
  // The stop landed on the same plan everywhere, with the same trace.
  for (int r = 1; r < 3; ++r) {
    EXPECT_EQ(three.counters[r].plans, three.counters[0].plans);
    EXPECT_EQ(three.counters[r].ops, three.counters[0].ops);
    EXPECT_EQ(three.counters[r].trace_digest, three.counters[0].trace_digest);
  }
  EXPECT_GT(three.counters[0].plans, 10u);
  for (int code : three.codes) EXPECT_EQ(code, -1);
}

TEST(Leader, ARefusalOnOneRankEndsThatRequestEverywhereAndServingContinues) {
  // Streams are numbered in admission order from 1; rank 1 refuses to open stream 2 (the second request).
  std::vector<Request> requests = {request_of(1, 6, false), request_of(2, 6, false), request_of(3, 6, false)};
  FollowerOptions refuse;
  refuse.refuse_open_stream = 2;
  Served s = serve(3, requests, refuse);
  FakeBackend reference(fake_options());
  EXPECT_EQ(s.outcomes[0].tokens, lanes::testing::serial_reference(reference, requests[0]));
  EXPECT_EQ(s.outcomes[1].finish.reason, lanes::FinishReason::error);
  EXPECT_NE(s.outcomes[1].finish.message.find("rank 1: test refusal: rank 1 refuses stream 2"), std::string::npos)
      << s.outcomes[1].finish.message;
  EXPECT_TRUE(s.outcomes[1].tokens.empty());
  EXPECT_EQ(s.outcomes[2].tokens, lanes::testing::serial_reference(reference, requests[2]));
  for (int code : s.codes) EXPECT_EQ(code, -1);  // no rank failed
  EXPECT_EQ(s.counters[1].trace_digest, s.counters[0].trace_digest);
}

TEST(Leader, APromptResumedFromTheCacheThroughTheFabricEqualsFresh) {
  // Snapshots and restores travel as plans: every rank keeps and restores its own part.
  testing::Fabric f = testing::make_fabric(3);
  std::vector<std::thread> followers;
  std::vector<FabricCounters> counters(3);
  for (int32_t r = 1; r < 3; ++r)
    followers.emplace_back([&, r] {
      FakeBackend b(fake_options());
      counters[static_cast<size_t>(r)] = run_follower(*f.controls[static_cast<size_t>(r)], b).counters;
    });
  FakeBackend local(fake_options());
  LeaderBackend leader(*f.controls[0], local);
  cache::PromptCacheOptions co;
  co.page_tokens = 16;
  co.model_id = leader.info().model_id;
  co.snapshot_version = leader.info().snapshot_version;
  auto cache = std::move(cache::PromptCache::open(co)).value();
  lanes::LaneHostOptions ho;
  ho.cache = cache.get();
  ho.prefill_rows = 16;
  Request r = request_of(9, 10, true);
  for (int i = 0; i < 30; ++i) r.prompt.push_back(3 + i % 40);  // 40+ tokens: pages at 16 and 32
  FakeBackend reference(fake_options());
  const std::vector<lanes::TokenId> expected = lanes::testing::serial_reference(reference, r);
  {
    lanes::LaneHost host(leader, ho);
    auto sink = std::make_shared<Collector>();
    const lanes::RequestId first = host.submit(r, sink).value();
    host.run_until_idle();
    const lanes::RequestId second = host.submit(r, sink).value();
    host.run_until_idle();
    EXPECT_EQ(sink->get(first).tokens, expected);
    EXPECT_EQ(sink->get(first).finish.usage.cached_prompt_tokens, 0);
    EXPECT_EQ(sink->get(second).tokens, expected);
    EXPECT_EQ(sink->get(second).finish.usage.cached_prompt_tokens, 32);
  }
  ASSERT_TRUE(leader.stop().ok());
  for (auto& t : followers) t.join();
  EXPECT_EQ(counters[1].trace_digest, leader.counters().trace_digest);
  EXPECT_EQ(counters[2].trace_digest, leader.counters().trace_digest);
}

TEST(Leader, RanksThatComputeDifferentTokensEndWithDiverged) {
  // Rank 2's fake has another logit scale: the same greedy tokens but other log-probabilities.
  std::vector<Request> requests = {request_of(4, 8, false)};
  requests[0].logprobs = true;
  Served s = serve(3, requests, {}, 3.0f);
  EXPECT_EQ(s.codes[0], kExitDiverged);
  EXPECT_EQ(s.outcomes[0].finish.reason, lanes::FinishReason::error);
}

TEST(Leader, ARankThatHeartbeatsButNeverAnswersEndsEveryRank) {
  // Rank 1's control channel is alive (its heartbeat thread runs) but nothing answers plans: a wedged rank.
  testing::Fabric f = testing::make_fabric(2);
  ASSERT_NE(f.controls[1], nullptr);
  auto o = f.controls[0]->options();
  FakeBackend local(fake_options());
  LeaderBackend leader(*f.controls[0], local);
  const auto t0 = std::chrono::steady_clock::now();
  Status s = leader.open(1, lanes::StreamSpec{});
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(f.fatals[0]->get_code(), kExitPeerLost);
  EXPECT_NE(f.fatals[0]->get_reason().find("rank 1 did not answer plan 1 within"), std::string::npos)
      << f.fatals[0]->get_reason();
  EXPECT_GE(waited, o.plan_timeout.count() / 1000.0 * 0.9);
  EXPECT_LT(waited, o.plan_timeout.count() / 1000.0 + 1.0);
}

TEST(Plan, EveryOpRoundTrips) {
  Plan p;
  p.sequence = 42;
  lanes::StreamSpec spec;
  spec.sampling = lanes::SamplingParams{0.7f, 40, 0.9f, 0.05f};
  spec.seed = 0xFEEDFACECAFEBEEFull;
  spec.max_rows = 77;
  p.ops.push_back(OpenOp{3, spec});
  p.ops.push_back(PrefillOp{{PieceOp{3, 0, {5, 6, 7}}, PieceOp{4, 8, {9}}}});
  lanes::Window w;
  w.stream = 3;
  w.start = 3;
  w.tokens = {8, 11, 12};
  w.logprobs = true;
  w.top_logprobs = 5;
  p.ops.push_back(VerifyOp{{w}});
  p.ops.push_back(KeepOp{3, 5});
  p.ops.push_back(DraftOp{{lanes::DraftRequest{3, 12, 5, 4}}});
  p.ops.push_back(SnapshotOp{3});
  p.ops.push_back(RestoreOp{4, {1, 2, 3}, 16});
  p.ops.push_back(ReleaseOp{3});
  const std::vector<uint8_t> bytes = encode_plan(p);
  auto back = decode_plan(bytes);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(encode_plan(*back), bytes);
  ASSERT_EQ(back->ops.size(), 8u);
  const auto& open = std::get<OpenOp>(back->ops[0]);
  EXPECT_EQ(open.spec.seed, 0xFEEDFACECAFEBEEFull);
  EXPECT_EQ(open.spec.sampling.top_k, 40);
  EXPECT_EQ(open.spec.sampling.min_p, 0.05f);
  EXPECT_EQ(std::get<VerifyOp>(back->ops[2]).windows[0].tokens, (std::vector<lanes::TokenId>{8, 11, 12}));
  EXPECT_EQ(std::get<VerifyOp>(back->ops[2]).windows[0].top_logprobs, 5);
  EXPECT_EQ(std::get<DraftOp>(back->ops[4]).requests[0].depth, 4);
  EXPECT_EQ(std::get<RestoreOp>(back->ops[6]).rows, 16);
  // Every shorter prefix is refused, never misread.
  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_FALSE(decode_plan(std::span(bytes).first(n)).ok()) << "prefix of " << n << " bytes";
}

TEST(Plan, AnUnknownOpTagIsRefused) {
  ByteWriter w;
  w.u64(1);
  w.u64(1);
  w.u8(99);
  w.u64(0);
  auto p = decode_plan(w.data());
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("unknown op tag 99"), std::string::npos) << p.status().to_string();
}

TEST(Plan, FabricSnapshotsSplitByRank) {
  const std::vector<uint8_t> blob = fabric_snapshot({{1}, {2, 2}, {3, 3, 3}});
  EXPECT_EQ(*fabric_snapshot_part(blob, 1, 3), (std::vector<uint8_t>{2, 2}));
  EXPECT_EQ(*fabric_snapshot_part(blob, 2, 3), (std::vector<uint8_t>{3, 3, 3}));
  auto wrong = fabric_snapshot_part(blob, 0, 2);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("a snapshot of 3 ranks cannot restore on 2"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::fabric
