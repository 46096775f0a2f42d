// A request's choices (n, best_of) against hand-written replies in OpenAI's shapes: streamed
// chunks carry their choice's index and each choice closes on its own, the usage chunk and [DONE]
// come once after the last; the whole reply lists choices by index; best_of returns the candidates
// with the highest summed logprob (ties: lower index) re-indexed from 0; usage counts the prompt
// once and every candidate's tokens. Fake text side: one token per byte.
#include "server/reply_choices.h"

#include <gtest/gtest.h>

#include "server/fake_engine.h"

namespace dsv4::server {
namespace {

using json = nlohmann::json;

// The tokens of `text`, each with `logprob`, for candidate `choice`.
GenerationEvent event(int32_t choice, const std::string& text, float logprob, bool done = false,
                      Finish f = Finish::none) {
  GenerationEvent e;
  e.choice = choice;
  for (unsigned char c : text) e.tokens.push_back(TokenOut{c, logprob, {}});
  e.done = done;
  e.finish = done ? f : Finish::none;
  if (done) e.cached_prompt_tokens = 2;
  return e;
}

AssemblerSetup setup(Endpoint ep, bool stream) {
  AssemblerSetup s;
  s.endpoint = ep;
  s.meta = {ep == Endpoint::chat ? "chatcmpl-n" : "cmpl-n", 3, "m"};
  s.stream = stream;
  s.include_usage = stream;
  s.prompt_tokens = 5;
  return s;
}

// The data payloads of an SSE text, "[DONE]" included.
std::vector<std::string> payloads(const std::string& sse) {
  std::vector<std::string> out;
  size_t at = 0;
  while ((at = sse.find("data: ", at)) != std::string::npos) {
    size_t end = sse.find("\n\n", at);
    out.push_back(sse.substr(at + 6, end - at - 6));
    at = end;
  }
  return out;
}

TEST(ReplyChoices, StreamedChunksCarryTheirIndexAndCloseOnce) {
  TextSide text = make_fake_text_side(4096);
  ReplyChoices r(setup(Endpoint::completions, true), text, 2, 2);
  std::string sse;
  sse += r.feed(event(1, "ab", -1.0f));
  sse += r.feed(event(0, "x", -1.0f));
  sse += r.feed(event(1, "c", -1.0f, true, Finish::length));
  EXPECT_FALSE(r.finished());
  sse += r.feed(event(1, "late", -1.0f));  // after its finish: dropped
  sse += r.feed(event(7, "bad", -1.0f));   // no such candidate: dropped
  sse += r.feed(event(0, "yz", -1.0f, true, Finish::stop));
  ASSERT_TRUE(r.finished());
  sse += r.finish_sse();
  const auto chunk = [](int index, const char* text, const char* finish) {
    json c = json::parse(R"({"id":"cmpl-n","object":"text_completion","created":3,"model":"m","usage":null})");
    c["choices"] = json::array({json{{"index", index}, {"text", text}, {"logprobs", nullptr},
                                     {"finish_reason", finish ? json(finish) : json(nullptr)}}});
    return c.dump();
  };
  const std::vector<std::string> expected = {
      chunk(1, "ab", nullptr), chunk(0, "x", nullptr), chunk(1, "c", nullptr), chunk(1, "", "length"),
      chunk(0, "yz", nullptr), chunk(0, "", "stop"),
      json::parse(R"({"id":"cmpl-n","object":"text_completion","created":3,"model":"m","choices":[],
        "usage":{"prompt_tokens":5,"completion_tokens":6,"total_tokens":11,
                 "prompt_tokens_details":{"cached_tokens":2}}})").dump(),
      "[DONE]"};
  EXPECT_EQ(payloads(sse), expected);
}

TEST(ReplyChoices, WholeReplyListsChoicesByIndexAndSumsUsage) {
  TextSide text = make_fake_text_side(4096);
  AssemblerSetup s = setup(Endpoint::chat, false);
  s.logprobs = true;
  ReplyChoices r(s, text, 2, 2);
  r.feed(event(1, "no", -0.5f, true, Finish::stop));  // the second choice finishes first
  r.feed(event(0, "yes", -0.25f, true, Finish::length));
  ASSERT_TRUE(r.finished());
  const auto lp = [](const std::string& t, float v) {
    json content = json::array();
    for (unsigned char c : t)
      content.push_back({{"token", std::string(1, char(c))}, {"logprob", v}, {"bytes", {int(c)}},
                         {"token_id", int(c)}, {"top_logprobs", json::array()}});
    return json{{"content", content}};
  };
  json expected = json::parse(R"({"id":"chatcmpl-n","object":"chat.completion","created":3,"model":"m",
    "choices":[
      {"index":0,"message":{"role":"assistant","content":"yes"},"finish_reason":"length"},
      {"index":1,"message":{"role":"assistant","content":"no"},"finish_reason":"stop"}],
    "usage":{"prompt_tokens":5,"completion_tokens":5,"total_tokens":10,
             "prompt_tokens_details":{"cached_tokens":2},
             "completion_tokens_details":{"reasoning_tokens":0}}})");
  expected["choices"][0]["logprobs"] = lp("yes", -0.25f);
  expected["choices"][1]["logprobs"] = lp("no", -0.5f);
  EXPECT_EQ(r.reply(), expected);
  EXPECT_EQ(r.finish_reason(), "length");
}

TEST(ReplyChoices, BestOfReturnsTheHighestSummedLogprobsReindexed) {
  TextSide text = make_fake_text_side(4096);
  // Sums: candidate 0: 3 * -1 = -3; 1: 2 * -1.25 = -2.5; 2: 5 * -0.5 = -2.5; 3: -4.
  // Best two: 1 and 2 tie at -2.5, the lower index first.
  ReplyChoices r(setup(Endpoint::completions, false), text, 2, 4);
  r.feed(event(2, "ccccc", -0.5f, true, Finish::length));
  r.feed(event(0, "aaa", -1.0f, true, Finish::stop));
  r.feed(event(3, "d", -4.0f, true, Finish::stop));
  r.feed(event(1, "bb", -1.25f, true, Finish::stop));
  ASSERT_TRUE(r.finished());
  EXPECT_EQ(r.returned(), (std::vector<int32_t>{1, 2}));
  // The client did not ask for logprobs: none shown (they ranked the candidates only).
  EXPECT_EQ(r.reply(), json::parse(R"({"id":"cmpl-n","object":"text_completion","created":3,"model":"m",
    "choices":[{"index":0,"text":"bb","logprobs":null,"finish_reason":"stop"},
               {"index":1,"text":"ccccc","logprobs":null,"finish_reason":"length"}],
    "usage":{"prompt_tokens":5,"completion_tokens":11,"total_tokens":16,
             "prompt_tokens_details":{"cached_tokens":2}}})"));
}

TEST(ReplyChoices, OneFailedCandidateFailsTheReply) {
  TextSide text = make_fake_text_side(4096);
  ReplyChoices r(setup(Endpoint::chat, true), text, 2, 2);
  r.feed(event(0, "ok", -1.0f, true, Finish::stop));
  GenerationEvent e;
  e.choice = 1;
  e.done = true;
  e.finish = Finish::error;
  e.error = Status(StatusCode::unavailable, "halted");
  EXPECT_EQ(r.feed(e), "");  // no closing chunk for a failed choice
  ASSERT_TRUE(r.finished());
  EXPECT_TRUE(r.failed());
  EXPECT_EQ(r.finish_sse(),
            "data: {\"error\":{\"code\":\"unavailable\",\"message\":\"halted\",\"param\":null,"
            "\"type\":\"service_unavailable\"}}\n\ndata: [DONE]\n\n");
}

}  // namespace
}  // namespace dsv4::server
