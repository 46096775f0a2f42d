// Choice constraints on the fake backend: masked draws, the constraint's steps, and the lane core's equalities
// (drafted, concurrent and resumed equal the serial reference).
//
// Expected tokens come from a plain serial loop written here: it chains the fake's hash, finds the allowed
// tokens by scanning the choices for the spelled prefix, and draws by the sampler's published rule applied
// to the allowed ids only (greedy: the largest logit, lowest id on ties; sampled without top-k / top-p:
// Gumbel-max over x / T - log(-log(u(seed, position, id))) from key_bits) — not through draw_keyed.
#include "lanes/choices.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "lanes/lane_host.h"
#include "lanes/test_support.h"

namespace dsv4::lanes {
namespace {

using testing::Collector;

// The draw among `allowed` by the rule stated above (temperature 0 or plain temperature sampling).
TokenId reference_draw(const std::vector<float>& logits, const std::vector<TokenId>& allowed, float temperature,
                       uint64_t seed, int64_t position) {
  TokenId best = -1;
  double best_score = 0.0;
  for (TokenId t : allowed) {
    double score = logits[static_cast<size_t>(t)];
    if (temperature > 0.0f) {
      score = score / static_cast<double>(temperature) -
              std::log(-std::log(key_uniform(key_bits(seed, position, t))));
    }
    if (best < 0 || score > best_score || (score == best_score && t < best)) {
      best = t;
      best_score = score;
    }
  }
  return best;
}

TEST(Choices, DrawKeyedTakesTheBestAllowedToken) {
  FakeBackend fake({});
  const std::vector<TokenId> allowed = {3, 17, 40, 41, 60};
  int differs = 0;
  for (uint64_t state = 1; state <= 200; ++state) {
    const std::vector<float> row = fake.logits(splitmix64_nth(77, state));
    for (float temperature : {0.0f, 0.7f, 1.3f}) {
      const SamplingParams params{temperature, 0, 1.0f, 0.0f};
      const int64_t position = static_cast<int64_t>(state) * 3;
      const TokenId got = draw_keyed(row, params, 99, position, allowed);
      EXPECT_EQ(got, reference_draw(row, allowed, temperature, 99, position)) << state << " T " << temperature;
      if (got != sample_keyed(row, params, 99, position)) ++differs;
    }
    // With top-k and top-p the draw still lands in the allowed set.
    const TokenId truncated = draw_keyed(row, SamplingParams{0.9f, 2, 0.5f, 0.1f}, 5, 11, allowed);
    EXPECT_TRUE(std::count(allowed.begin(), allowed.end(), truncated)) << state;
  }
  EXPECT_GT(differs, 100);  // the mask really changes draws (5 of 61 tokens allowed)
  // No mask: the plain keyed draw.
  const std::vector<float> row = fake.logits(12345);
  EXPECT_EQ(draw_keyed(row, SamplingParams{0.8f, 0, 1.0f, 0.0f}, 4, 9, {}),
            sample_keyed(row, SamplingParams{0.8f, 0, 1.0f, 0.0f}, 4, 9));
}

TEST(Choices, StepsThroughSharedTokensAndPrefixes) {
  const TokenChoices choices = {{5, 9}, {5, 6, 9}, {7, 6, 9}};
  auto step = [&](std::vector<TokenId> spelled) { return choice_step(choices, spelled); };
  EXPECT_EQ(step({}).next, (std::vector<TokenId>{5, 7}));
  EXPECT_FALSE(step({}).complete);
  EXPECT_EQ(step({5}).next, (std::vector<TokenId>{6, 9}));
  EXPECT_EQ(step({5, 6}).next, (std::vector<TokenId>{9}));
  EXPECT_EQ(step({7, 6}).next, (std::vector<TokenId>{9}));
  EXPECT_TRUE(step({5, 9}).complete);
  EXPECT_TRUE(step({5, 6, 9}).complete);
  EXPECT_FALSE(step({6}).complete);
  EXPECT_TRUE(step({6}).next.empty());  // broken
  // A choice that is a prefix of another completes first (the shortest wins).
  EXPECT_TRUE(choice_step({{4, 8}, {4, 8, 2}}, std::vector<TokenId>{4, 8}).complete);

  // Window masks: the pending row continues the spelled prefix; proposals extend it row by row.
  const std::vector<TokenId> window = {33, 5, 6, 9, 12};
  auto masks = window_masks(choices, std::vector<TokenId>{}, window, 0);
  ASSERT_EQ(masks.size(), 5u);
  EXPECT_EQ(masks[0], (std::vector<TokenId>{5, 7}));
  EXPECT_EQ(masks[1], (std::vector<TokenId>{6, 9}));
  EXPECT_EQ(masks[2], (std::vector<TokenId>{9}));
  EXPECT_TRUE(masks[3].empty());  // {5, 6, 9} is spelled: free from here
  EXPECT_TRUE(masks[4].empty());
  // A proposal that breaks the constraint leaves later rows unmasked (they cannot be kept).
  masks = window_masks(choices, std::vector<TokenId>{}, std::vector<TokenId>{33, 8, 1}, 0);
  ASSERT_EQ(masks.size(), 3u);
  EXPECT_EQ(masks[0], (std::vector<TokenId>{5, 7}));
  EXPECT_TRUE(masks[1].empty());
  // Forced rows get no mask; the last row draws the first constrained token.
  masks = window_masks(choices, std::vector<TokenId>{}, std::vector<TokenId>{33, 20, 21}, 2);
  ASSERT_EQ(masks.size(), 3u);
  EXPECT_TRUE(masks[0].empty() && masks[1].empty());
  EXPECT_EQ(masks[2], (std::vector<TokenId>{5, 7}));
  // Already complete: no masks at all.
  EXPECT_TRUE(window_masks(choices, std::vector<TokenId>{5, 9}, window, 0).empty());
}

// The serial reference with forced tokens, choices, EOS and max_tokens (no stop rules, no thinking).
std::vector<TokenId> reference(const FakeBackend& fake, const Request& r) {
  const uint64_t seed = r.seed.has_value() ? *r.seed : seed_from_prompt(r.prompt);
  uint64_t h = FakeBackend::kFakeRoot;
  int64_t position = 0;
  for (size_t i = 0; i + 1 < r.prompt.size(); ++i) h = FakeBackend::chain(h, position++, r.prompt[i]);
  TokenId feed = r.prompt.back();
  std::vector<TokenId> out, spelled;
  bool choosing = !r.choices.empty();
  for (;;) {
    h = FakeBackend::chain(h, position, feed);
    const std::vector<float> row = fake.logits(h);
    TokenId token;
    if (out.size() < r.forced_tokens.size()) {
      token = r.forced_tokens[out.size()];
    } else if (choosing) {
      std::set<TokenId> next;
      for (const auto& c : r.choices) {
        if (c.size() > spelled.size() && std::equal(spelled.begin(), spelled.end(), c.begin())) {
          next.insert(c[spelled.size()]);
        }
      }
      token = reference_draw(row, std::vector<TokenId>(next.begin(), next.end()), r.sampling.temperature, seed,
                             position + 1);
      spelled.push_back(token);
      for (const auto& c : r.choices) choosing = choosing && c != spelled;
    } else {
      token = reference_draw(row, [&] {
        std::vector<TokenId> all(static_cast<size_t>(fake.info().vocab_size));
        for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<TokenId>(i);
        return all;
      }(), r.sampling.temperature, seed, position + 1);
    }
    ++position;
    out.push_back(token);
    if (token == 0 && out.size() > r.forced_tokens.size() && !choosing) break;  // EOS (the fake's id 0)
    if (static_cast<int32_t>(out.size()) >= r.max_tokens) break;
    feed = token;
  }
  return out;
}

Request choice_request(uint64_t salt, bool sampled, bool draft, TokenChoices choices,
                       std::vector<TokenId> forced = {}) {
  Request r;
  for (int i = 0; i < 20; ++i) r.prompt.push_back(1 + static_cast<TokenId>(splitmix64_nth(salt, i + 1) % 60));
  if (sampled) {
    r.sampling = SamplingParams{0.9f, 0, 1.0f, 0.0f};
    r.seed = salt * 31;
  }
  r.max_tokens = 24;
  r.draft = draft;
  r.choices = std::move(choices);
  r.forced_tokens = std::move(forced);
  return r;
}

// Names as token sequences: a shared first token, a name that is a prefix of another, a closing token (9)
// shared by all; no choice holds EOS (0).
const TokenChoices kNames = {{5, 9}, {5, 6, 9}, {7, 6, 9}, {11, 12, 13, 14, 15, 9}};

TEST(Choices, LaneCoreSpellsAChoiceExactlyDraftedOrNot) {
  std::set<size_t> spelled_choices;
  int64_t drafted = 0;
  for (bool sampled : {false, true}) {
    for (uint64_t salt = 1; salt <= 24; ++salt) {
      std::vector<TokenId> forced;
      if (salt % 3 == 0) forced = {20, 21};
      std::vector<TokenId> outputs[2];
      for (bool draft : {false, true}) {
        FakeBackend fake({});
        LaneHost host(fake, {});
        auto sink = std::make_shared<Collector>();
        Request r = choice_request(salt, sampled, draft, kNames, forced);
        const std::vector<TokenId> expected = reference(fake, r);
        StatusOr<RequestId> id = host.submit(r, sink);
        ASSERT_TRUE(id.ok()) << id.status().to_string();
        host.run_until_idle();
        testing::Outcome o = sink->get(*id);
        EXPECT_EQ(o.tokens, expected) << "salt " << salt << " sampled " << sampled << " draft " << draft;
        EXPECT_TRUE(o.finish.reason == FinishReason::stop || o.finish.reason == FinishReason::length);
        drafted += o.finish.usage.drafted_tokens;
        outputs[draft] = o.tokens;
      }
      EXPECT_EQ(outputs[0], outputs[1]) << "salt " << salt;
      // The output after the forced tokens starts with a whole choice.
      bool found = false;
      for (size_t c = 0; c < kNames.size(); ++c) {
        const auto& name = kNames[c];
        if (outputs[0].size() >= forced.size() + name.size() &&
            std::equal(name.begin(), name.end(), outputs[0].begin() + static_cast<ptrdiff_t>(forced.size()))) {
          found = true;
          spelled_choices.insert(c);
        }
      }
      EXPECT_TRUE(found) << "salt " << salt;
    }
  }
  EXPECT_GT(drafted, 0);
  EXPECT_GE(spelled_choices.size(), 3u);  // the draws really choose among the names
}

TEST(Choices, ConcurrentEqualsSolo) {
  FakeBackend fake({});
  LaneHost host(fake, {});
  auto sink = std::make_shared<Collector>();
  std::vector<std::pair<RequestId, std::vector<TokenId>>> runs;
  for (uint64_t salt = 40; salt < 48; ++salt) {
    Request r = choice_request(salt, salt % 2 == 1, true, salt % 4 < 2 ? kNames : TokenChoices{});
    const std::vector<TokenId> expected = reference(fake, r);
    StatusOr<RequestId> id = host.submit(r, sink);
    ASSERT_TRUE(id.ok());
    runs.emplace_back(*id, expected);
  }
  host.run_until_idle();
  for (const auto& [id, expected] : runs) EXPECT_EQ(sink->get(id).tokens, expected) << "request " << id;
}

TEST(Choices, ResumedEqualsFresh) {
  FakeBackend fake({});
  auto cache = std::move(cache::PromptCache::open({.page_tokens = 16, .ram_bytes = 1 << 20,
                                                   .row_tables = cache_row_tables(fake.info())})).value();
  LaneHost host(fake, LaneHostOptions{.cache = cache.get()});
  auto sink = std::make_shared<Collector>();
  for (bool sampled : {false, true}) {
    const Request r = choice_request(90 + sampled, sampled, true, kNames);
    const std::vector<TokenId> expected = reference(fake, r);
    for (int64_t cached : {0, 16}) {
      StatusOr<RequestId> id = host.submit(r, sink);
      ASSERT_TRUE(id.ok());
      host.run_until_idle();
      testing::Outcome o = sink->get(*id);
      EXPECT_EQ(o.finish.usage.cached_prompt_tokens, cached);
      EXPECT_EQ(o.tokens, expected) << "sampled " << sampled << " cached " << cached;
    }
  }
}

// Forced tokens longer than a verify window (max_verify_rows - 1) span several windows with no draw between
// them; the choices follow the last one.
TEST(Choices, LongForcedRunsSpanWindowsThenTheChoices) {
  for (bool draft : {false, true}) {
    FakeBackendOptions options;
    options.max_verify_rows = 4;
    FakeBackend fake(options);
    LaneHost host(fake, {});
    auto sink = std::make_shared<Collector>();
    for (bool with_choices : {false, true}) {
      Request r = choice_request(7, true, draft, with_choices ? kNames : TokenChoices{},
                                 {10, 11, 12, 13, 14, 15, 16, 17});
      const std::vector<TokenId> expected = reference(fake, r);
      StatusOr<RequestId> id = host.submit(r, sink);
      ASSERT_TRUE(id.ok());
      host.run_until_idle();
      EXPECT_EQ(sink->get(*id).tokens, expected) << "draft " << draft << " choices " << with_choices;
      if (!with_choices) EXPECT_EQ(expected, testing::serial_reference(fake, r));  // the two references agree
    }
  }
}

TEST(Choices, RefusesEmptyChoicesAndThinkingBudgets) {
  FakeBackend fake({});
  LaneHost host(fake, {});
  auto sink = std::make_shared<Collector>();
  Request r = choice_request(1, false, true, {{5}, {}});
  EXPECT_EQ(host.submit(r, sink).status().code(), StatusCode::invalid_argument);
  r = choice_request(1, false, true, {{5}, {61}});
  EXPECT_EQ(host.submit(r, sink).status().code(), StatusCode::invalid_argument);
  r = choice_request(1, false, true, {{5}});
  r.thinking = ThinkingBudget{4, 3, {3}};
  EXPECT_EQ(host.submit(r, sink).status().code(), StatusCode::invalid_argument);
}

}  // namespace
}  // namespace dsv4::lanes
