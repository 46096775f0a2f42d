// Finish rules on forced tokens: a scored continuation (forced_tokens, or a prompt scored token by token) never
// finishes by EOS, stop sequence or stop string, and those rules match only in the output after it. The golden:
// a request with prompt P and forced F equals F followed by a request with prompt P + F (the same seed: draws are
// keyed by absolute position), whose stop rules can only see the bytes after F.
#include <gtest/gtest.h>

#include "lanes/lane_host.h"
#include "lanes/test_support.h"

namespace dsv4::lanes {
namespace {

using testing::Collector;

std::string bytes_of(TokenId t) { return "t" + std::to_string(t) + " "; }

testing::Outcome run_one(const Request& r, bool with_bytes) {
  FakeBackend fake(FakeBackendOptions{});
  LaneHostOptions options;
  if (with_bytes) options.token_bytes = bytes_of;
  LaneHost host(fake, options);
  auto sink = std::make_shared<Collector>();
  StatusOr<RequestId> id = host.submit(r, sink);
  EXPECT_TRUE(id.ok()) << id.status().to_string();
  host.run_until_idle();
  return sink->get(id.ok() ? *id : 0);
}

struct Pair {
  Request forced;  // prompt P, forced F, F.size() + free tokens
  Request fresh;   // prompt P + F, free tokens
};

Pair make_pair(const std::vector<TokenId>& forced, int32_t free, bool draft) {
  Pair p;
  for (int i = 0; i < 24; ++i) p.forced.prompt.push_back(1 + (i * 17 + 5) % 59);
  p.forced.sampling = SamplingParams{0.9f, 0, 0.95f, 0.0f};
  p.forced.seed = 77;
  p.forced.draft = draft;
  p.forced.logprobs = true;
  p.forced.forced_tokens = forced;
  p.forced.max_tokens = static_cast<int32_t>(forced.size()) + free;
  p.fresh = p.forced;
  p.fresh.forced_tokens.clear();
  p.fresh.prompt.insert(p.fresh.prompt.end(), forced.begin(), forced.end());
  p.fresh.max_tokens = free;
  return p;
}

// The forced run is the forced tokens, then exactly the fresh run (tokens, logprobs and finish).
void expect_forced_then_fresh(const Pair& p, bool with_bytes, int64_t forced_bytes) {
  const testing::Outcome a = run_one(p.forced, with_bytes);
  const testing::Outcome b = run_one(p.fresh, with_bytes);
  const size_t n = p.forced.forced_tokens.size();
  ASSERT_GT(a.tokens.size(), n);
  EXPECT_EQ(std::vector<TokenId>(a.tokens.begin(), a.tokens.begin() + static_cast<ptrdiff_t>(n)),
            p.forced.forced_tokens);
  EXPECT_EQ(std::vector<TokenId>(a.tokens.begin() + static_cast<ptrdiff_t>(n), a.tokens.end()), b.tokens);
  EXPECT_EQ(std::vector<float>(a.logprobs.begin() + static_cast<ptrdiff_t>(n), a.logprobs.end()), b.logprobs);
  EXPECT_EQ(a.finish.reason, b.finish.reason);
  EXPECT_EQ(a.finish.stop_kind, b.finish.stop_kind);
  EXPECT_EQ(a.finish.stop_index, b.finish.stop_index);
  if (b.finish.stop_byte_offset >= 0) EXPECT_EQ(a.finish.stop_byte_offset, b.finish.stop_byte_offset + forced_bytes);
  EXPECT_EQ(a.finish.usage.completion_tokens, static_cast<int64_t>(a.tokens.size()));
}

TEST(ForcedFinish, EosInsideForcedTokensDoesNotFinish) {
  // The fake's EOS is token 0; forced tokens hold it twice, the last one included.
  for (bool draft : {false, true}) {
    Pair p = make_pair({5, 0, 7, 9, 0}, 12, draft);
    const testing::Outcome a = run_one(p.forced, false);
    ASSERT_GE(a.tokens.size(), 6u) << "the request finished on a forced EOS";
    expect_forced_then_fresh(p, false, 0);
  }
}

TEST(ForcedFinish, OnlyForcedTokensEndsByLength) {
  Pair p = make_pair({5, 0, 7}, 0, true);
  const testing::Outcome a = run_one(p.forced, false);
  EXPECT_EQ(a.tokens, p.forced.forced_tokens);
  EXPECT_EQ(a.finish.reason, FinishReason::length);
}

TEST(ForcedFinish, StopStringsMatchOnlyAfterForcedBytes) {
  for (bool draft : {false, true}) {
    const std::vector<TokenId> forced = {11, 22, 33, 44};
    // A string inside the forced bytes, and one spanning the last forced token and whatever follows it.
    Pair probe = make_pair(forced, 12, draft);
    const testing::Outcome fresh = run_one(probe.fresh, false);
    ASSERT_FALSE(fresh.tokens.empty());
    const std::string across = "44 t" + std::to_string(fresh.tokens[0]).substr(0, 1);
    int64_t forced_bytes = 0;
    for (TokenId t : forced) forced_bytes += static_cast<int64_t>(bytes_of(t).size());
    for (const std::vector<std::string>& stops :
         {std::vector<std::string>{"t22 t33"}, std::vector<std::string>{across},
          std::vector<std::string>{"t22", "t" + std::to_string(fresh.tokens[2]) + " "}}) {
      Pair p = make_pair(forced, 12, draft);
      p.forced.stop_strings = stops;
      p.fresh.stop_strings = stops;
      expect_forced_then_fresh(p, true, forced_bytes);
    }
    // The last case stops in the free output, by the second string, at the fresh run's offset plus the forced bytes.
    Pair p = make_pair(forced, 12, draft);
    p.forced.stop_strings = {"t22", "t" + std::to_string(fresh.tokens[2]) + " "};
    const testing::Outcome a = run_one(p.forced, true);
    EXPECT_EQ(a.finish.stop_kind, StopKind::string);
    EXPECT_EQ(a.finish.stop_index, 1);
    EXPECT_GE(a.finish.stop_byte_offset, forced_bytes);
  }
}

TEST(ForcedFinish, StopSequencesMatchOnlyAfterForcedTokens) {
  for (bool draft : {false, true}) {
    const std::vector<TokenId> forced = {3, 4, 5};
    Pair probe = make_pair(forced, 10, draft);
    const testing::Outcome fresh = run_one(probe.fresh, false);
    ASSERT_GE(fresh.tokens.size(), 2u);
    Pair p = probe;
    // Inside the forced tokens, and across their end: neither may finish the request.
    p.forced.stop_sequences = {{4, 5}, {5, fresh.tokens[0]}};
    p.fresh.stop_sequences = p.forced.stop_sequences;
    expect_forced_then_fresh(p, false, 0);
    const testing::Outcome a = run_one(p.forced, false);
    EXPECT_GT(a.tokens.size(), forced.size() + 1);
  }
}

}  // namespace
}  // namespace dsv4::lanes
