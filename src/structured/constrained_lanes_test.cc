// Structured outputs through the lane core on the fake backend: every request's tokens equal a serial reference
// written here (one token a round; each mask by checking every token's bytes with the matcher, not the trie), with
// drafts on and off and with other requests beside it; the outputs that end parse as JSON and hold to the schema.
#include <gtest/gtest.h>

#include <set>

#include "lanes/fanout.h"
#include "lanes/lane_host.h"
#include "lanes/test_support.h"
#include "structured/grammar_constraint.h"
#include "structured/json_schema.h"

namespace dsv4::structured {
namespace {

using lanes::FakeBackend;
using lanes::Request;
using lanes::TokenMask;
using ojson = nlohmann::ordered_json;

constexpr TokenId kEos = 0;
constexpr TokenId kThinkEnd = 299;  // a special token ending a reasoning block

// Token 0: EOS; 1..255: that byte; then a few multi-byte pieces; the last: the reasoning block's end (special).
std::shared_ptr<const Vocabulary> vocab() {
  std::vector<std::string> bytes = {"<eos>"};
  for (int b = 1; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  for (const char* s : {"{\"", "\":", "\",", "\"}", "true", "false", "name", "\"name\":\"", "12", "\"a\"", ", "}) {
    bytes.push_back(s);
  }
  while (bytes.size() < static_cast<size_t>(kThinkEnd)) bytes.push_back("zz" + std::to_string(bytes.size()));
  bytes.push_back("</think>");
  std::vector<bool> usable(bytes.size(), true);
  usable[kEos] = usable[kThinkEnd] = false;
  return std::make_shared<Vocabulary>(std::move(bytes), std::move(usable));
}

const char* kSchema = R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},
  "n":{"type":"integer"},"ok":{"type":"boolean"},"tags":{"type":"array","items":{"enum":["a","bc"]},"maxItems":3}},
  "required":["name","n"]})";

lanes::FakeBackendOptions fake_options() {
  lanes::FakeBackendOptions o;
  o.vocab_size = kThinkEnd + 1;
  return o;
}

// The serial reference: each step's mask by the matcher on every token's bytes (EOS where the output is whole).
std::vector<TokenId> reference(const FakeBackend& fake, const Vocabulary& v, const Grammar& g, const Request& r) {
  const uint64_t seed = r.seed.has_value() ? *r.seed : lanes::seed_from_prompt(r.prompt);
  Matcher m(g);
  MatchState state;
  m.start(state);
  bool active = r.constraint_after < 0;
  int32_t thought = 0;  // tokens drawn while thinking (the budget's count)
  uint64_t h = FakeBackend::kFakeRoot;
  int64_t position = 0;
  for (size_t i = 0; i + 1 < r.prompt.size(); ++i) h = FakeBackend::chain(h, position++, r.prompt[i]);
  TokenId feed = r.prompt.back();
  std::vector<TokenId> out;
  for (;;) {
    h = FakeBackend::chain(h, position, feed);
    const std::vector<float> row = fake.logits(h);
    TokenId token;
    if (active) {
      TokenMask mask(v.size());
      for (TokenId t = 0; t < v.size(); ++t) {
        MatchState probe;
        state.copy_to(probe);
        if (v.usable(t) && m.feed(probe, v.bytes(t))) mask.allow(t);
      }
      if (m.may_end(state)) mask.allow(kEos);
      token = lanes::draw_masked(row, r.sampling, seed, position + 1, mask);
      if (token != kEos) EXPECT_TRUE(m.feed(state, v.bytes(token)));
    } else if (r.thinking.max_tokens >= 0 && thought == r.thinking.max_tokens) {
      token = r.thinking.close_tokens[0];  // the budget's close, forced
      active = true;
    } else {
      token = lanes::sample_keyed(row, r.sampling, seed, position + 1);
      ++thought;
      if (token == r.constraint_after) active = true;
    }
    ++position;
    out.push_back(token);
    if (token == kEos || static_cast<int32_t>(out.size()) >= r.max_tokens) break;
    feed = token;
  }
  return out;
}

Request make_request(uint64_t salt, bool sampled, bool draft, std::shared_ptr<const lanes::TokenConstraint> c,
                     TokenId after) {
  Request r;
  for (int i = 0; i < 12; ++i) r.prompt.push_back(1 + static_cast<TokenId>(lanes::splitmix64_nth(salt, i + 1) % 250));
  if (sampled) {
    r.sampling = lanes::SamplingParams{0.8f, 0, 0.95f, 0.0f};
    r.seed = salt * 77;
  }
  r.max_tokens = 300;
  r.draft = draft;
  r.constraint = std::move(c);
  r.constraint_after = after;
  return r;
}

// The output's text after the token that starts the constraint (`after` < 0: all of it).
std::string text_of(const Vocabulary& v, const std::vector<TokenId>& tokens, TokenId after) {
  std::string s;
  size_t i = 0;
  if (after >= 0) {
    while (i < tokens.size() && tokens[i] != after) ++i;
    ++i;
  }
  for (; i < tokens.size(); ++i) {
    if (tokens[i] != kEos) s += v.bytes(tokens[i]);
  }
  return s;
}

TEST(ConstrainedLanes, DraftedConcurrentAndSoloEqualTheSerialReference) {
  auto v = vocab();
  const ojson schema = ojson::parse(kSchema);
  StatusOr<Grammar> g = json_schema_grammar(schema);
  ASSERT_TRUE(g.ok());
  auto constraint = std::make_shared<GrammarConstraint>(v, *g);
  int ended = 0, drafted = 0, ended_after = 0;
  for (bool sampled : {false, true}) {
    std::vector<Request> requests;
    for (uint64_t salt = 1; salt <= 6; ++salt) requests.push_back(make_request(salt, sampled, true, constraint, -1));
    // Requests whose constraint starts after a free reasoning block, ended by the block's end token, which a
    // thinking budget forces after 3 drawn tokens.
    for (uint64_t salt = 97; salt <= 99; ++salt) {
      Request r = make_request(salt, sampled, true, constraint, kThinkEnd);
      r.thinking = lanes::ThinkingBudget{3, kThinkEnd, {kThinkEnd}};
      requests.push_back(std::move(r));
    }
    for (const Request& base : requests) {
      FakeBackend probe(fake_options());
      const std::vector<TokenId> expected = reference(probe, *v, *g, base);
      for (bool draft : {false, true}) {
        FakeBackend fake(fake_options());
        lanes::LaneHost host(fake, {});
        auto sink = std::make_shared<lanes::testing::Collector>();
        Request r = base;
        r.draft = draft;
        StatusOr<lanes::RequestId> id = host.submit(r, sink);
        ASSERT_TRUE(id.ok()) << id.status().to_string();
        host.run_until_idle();
        const lanes::testing::Outcome o = sink->get(*id);
        EXPECT_EQ(o.tokens, expected) << "draft " << draft << " sampled " << sampled;
        drafted += static_cast<int>(o.finish.usage.accepted_tokens);
      }
      const bool started = base.constraint_after < 0 || std::find(expected.begin(), expected.end(),
                                                                  base.constraint_after) != expected.end();
      if (started && !expected.empty() && expected.back() == kEos) {
        ++ended;
        if (base.constraint_after >= 0) ++ended_after;
        const std::string text = text_of(*v, expected, base.constraint_after);
        const ojson doc = ojson::parse(text, nullptr, false);
        ASSERT_FALSE(doc.is_discarded()) << text;
        EXPECT_TRUE(doc.contains("name") && doc["name"].is_string() && doc.contains("n") &&
                    doc["n"].is_number_integer())
            << text;
      }
    }
    // Concurrent: all of them in one host at once, drafts on, each equal to its solo reference.
    FakeBackend fake(fake_options());
    lanes::LaneHost host(fake, {});
    auto sink = std::make_shared<lanes::testing::Collector>();
    std::vector<lanes::RequestId> ids;
    for (const Request& r : requests) ids.push_back(*host.submit(r, sink));
    host.run_until_idle();
    for (size_t i = 0; i < requests.size(); ++i) {
      FakeBackend probe(fake_options());
      EXPECT_EQ(sink->get(ids[i]).tokens, reference(probe, *v, *g, requests[i])) << "concurrent " << i;
    }
  }
  EXPECT_GT(ended, 6);    // most outputs reach their end within max_tokens
  EXPECT_GT(drafted, 0);  // some drafts were accepted under the mask
  EXPECT_GT(ended_after, 0);  // a constraint that started late held too
}

TEST(ConstrainedLanes, EveryChoiceOfNHoldsAndEqualsItsSoloRequest) {
  auto v = vocab();
  StatusOr<Grammar> g = json_schema_grammar(ojson::parse(kSchema));
  ASSERT_TRUE(g.ok());
  auto constraint = std::make_shared<GrammarConstraint>(v, *g);
  Request r = make_request(5, true, true, constraint, -1);
  r.n = 3;
  FakeBackend fake(fake_options());
  lanes::LaneHost host(fake, {});
  auto sink = std::make_shared<lanes::testing::Collector>();
  StatusOr<lanes::RequestId> id = host.submit(r, sink);
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  host.run_until_idle();
  for (int32_t i = 0; i < 3; ++i) {
    Request solo = r;
    solo.n = 1;
    solo.seed = lanes::member_seed(*r.seed, i);
    FakeBackend probe(fake_options());
    EXPECT_EQ(sink->get(*id + static_cast<uint64_t>(i)).tokens, reference(probe, *v, *g, solo)) << "choice " << i;
  }
}

TEST(ConstrainedLanes, ConstraintRefusesForcedTokensAndChoices) {
  auto v = vocab();
  auto constraint = std::make_shared<GrammarConstraint>(v, json_object_grammar());
  FakeBackend fake(fake_options());
  lanes::LaneHost host(fake, {});
  Request r = make_request(3, false, true, constraint, -1);
  r.forced_tokens = {5};
  StatusOr<lanes::RequestId> id = host.submit(r, std::make_shared<lanes::testing::Collector>());
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("forced tokens"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::structured
