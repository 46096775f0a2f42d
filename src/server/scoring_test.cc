// Prompt scoring replies (echo, prompt_logprobs) against hand-written JSON in OpenAI's legacy
// completions shape and vLLM's prompt_logprobs shape, on the fake text side (one token per byte,
// BOS 256 with no output bytes).
#include <gtest/gtest.h>

#include "server/assembler.h"
#include "server/fake_engine.h"
#include "server/schema.h"

namespace dsv4::server {
namespace {

using json = nlohmann::json;

TokenOut tok(int32_t id, float logprob, std::vector<TopLogprob> top = {}) {
  TokenOut t;
  t.token = id;
  t.logprob = logprob;
  t.top = std::move(top);
  return t;
}

GenerationEvent event(std::vector<TokenOut> tokens, bool done = false, Finish f = Finish::none) {
  GenerationEvent e;
  e.tokens = std::move(tokens);
  e.done = done;
  e.finish = f;
  return e;
}

// An echo of the prompt "abc" (first token 'a', then 'b' and 'c' scored) and 2 generated tokens.
AssemblerSetup echo_setup(bool stream) {
  AssemblerSetup s;
  s.endpoint = Endpoint::completions;
  s.meta = {"cmpl-e", 1, "m"};
  s.stream = stream;
  s.logprobs = true;
  s.top_logprobs = 1;
  s.prompt_tokens = 3;
  s.echo = true;
  s.prompt_first = 'a';
  s.scored_prompt = 2;
  return s;
}

std::vector<GenerationEvent> echo_events() {
  // The engine was asked for 2 alternatives (a prompt_logprobs request may ask for more than
  // logprobs); the reply shows 1.
  return {event({tok('b', -0.5f, {{'x', -0.25f}, {'b', -0.5f}}), tok('c', -1.0f, {{'c', -1.0f}, {'y', -2.0f}})}),
          event({tok('d', -0.75f, {{'d', -0.75f}, {'z', -3.0f}}), tok('e', -2.0f, {{'q', -1.5f}, {'e', -2.0f}})},
                true, Finish::length)};
}

const char* kEchoLogprobs = R"({
  "tokens": ["a", "b", "c", "d", "e"],
  "token_logprobs": [null, -0.5, -1.0, -0.75, -2.0],
  "top_logprobs": [null, {"x": -0.25}, {"c": -1.0}, {"d": -0.75}, {"q": -1.5}],
  "text_offset": [0, 1, 2, 3, 4],
  "token_ids": [97, 98, 99, 100, 101]})";

TEST(Scoring, EchoReplyStartsWithThePromptAndItsLogprobs) {
  TextSide text = make_fake_text_side(4096);
  Assembler a(echo_setup(false), text);
  for (const auto& e : echo_events()) a.feed(e);
  ASSERT_TRUE(a.finished());
  const json r = a.reply();
  EXPECT_EQ(r["choices"][0]["text"], "abcde");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["choices"][0]["logprobs"], json::parse(kEchoLogprobs));
  EXPECT_FALSE(r["choices"][0].contains("prompt_logprobs"));
  // The prompt is not completion: 3 prompt tokens, 2 generated.
  EXPECT_EQ(r["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(r["usage"]["completion_tokens"], 2);
}

TEST(Scoring, EchoStreamedEqualsWholeAndThePromptComesFirst) {
  TextSide text = make_fake_text_side(4096);
  Assembler a(echo_setup(true), text);
  std::vector<std::string> chunks;
  for (const auto& e : echo_events()) chunks.push_back(a.feed(e));
  chunks.push_back(a.finish_sse());
  std::string textout;
  json lp = {{"tokens", json::array()}, {"token_logprobs", json::array()},
             {"top_logprobs", json::array()}, {"text_offset", json::array()}, {"token_ids", json::array()}};
  bool first = true;
  for (const auto& sse : chunks) {
    size_t at = 0;
    while ((at = sse.find("data: {", at)) != std::string::npos) {
      const size_t end = sse.find("\n\n", at);
      const json c = json::parse(sse.substr(at + 6, end - at - 6));
      at = end;
      if (first) {
        // The first chunk carries the whole echoed prompt.
        EXPECT_EQ(c["choices"][0]["text"], "abc");
        first = false;
      }
      textout += c["choices"][0]["text"].get<std::string>();
      if (c["choices"][0]["logprobs"].is_null()) continue;
      for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset", "token_ids"})
        for (const auto& v : c["choices"][0]["logprobs"][k]) lp[k].push_back(v);
    }
  }
  EXPECT_EQ(textout, "abcde");
  EXPECT_EQ(lp, json::parse(kEchoLogprobs));
}

TEST(Scoring, EchoWithMaxTokensZeroIsThePromptAlone) {
  TextSide text = make_fake_text_side(4096);
  AssemblerSetup s = echo_setup(false);
  s.scored_prompt = 0;  // a one-token prompt: nothing scored, nothing generated
  s.prompt_tokens = 1;
  Assembler a(s, text);
  a.feed(event({}, true, Finish::length));
  const json r = a.reply();
  EXPECT_EQ(r["choices"][0]["text"], "a");
  EXPECT_EQ(r["choices"][0]["logprobs"]["token_logprobs"], json::parse("[null]"));
  EXPECT_EQ(r["choices"][0]["logprobs"]["top_logprobs"], json::parse("[null]"));
  EXPECT_EQ(r["usage"]["completion_tokens"], 0);
}

TEST(Scoring, StopStringsCutOnlyTheGeneratedText) {
  // Prompt "aSTOP" echoed (its STOP is not a match), then "xSTOPy" generated: the engine's match
  // starts at byte 5 of its output "STOP" + "xSTOP" (the scored prompt tokens are its forced
  // output), so the reply is the prompt and "x".
  TextSide text = make_fake_text_side(4096);
  AssemblerSetup s = echo_setup(false);
  s.scored_prompt = 4;
  s.prompt_tokens = 5;
  s.stop = {"STOP"};
  s.logprobs = false;
  Assembler a(s, text);
  a.feed(event({tok('S', -1), tok('T', -1), tok('O', -1), tok('P', -1), tok('x', -1), tok('S', -1)}));
  GenerationEvent last = event({tok('T', -1), tok('O', -1), tok('P', -1)}, true, Finish::stop);
  last.stop_offset = 5;
  a.feed(last);
  const json r = a.reply();
  EXPECT_EQ(r["choices"][0]["text"], "aSTOPx");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r["usage"]["completion_tokens"], 5);  // x S T O P: every delivered generated token
}

TEST(Scoring, TextOffsetsCountCharacters) {
  // "aé" + "z": é is two byte tokens; z starts at character 2 (Python's len("aé") = 2).
  TextSide text = make_fake_text_side(4096);
  AssemblerSetup s = echo_setup(false);
  s.top_logprobs = 0;
  s.prompt_tokens = 3;
  Assembler a(s, text);
  a.feed(event({tok(0xC3, -1), tok(0xA9, -1)}));
  a.feed(event({tok('z', -1)}, true, Finish::length));
  const json r = a.reply();
  EXPECT_EQ(r["choices"][0]["text"], "a\xC3\xA9z");
  EXPECT_EQ(r["choices"][0]["logprobs"]["text_offset"], json::parse("[0, 1, 2, 2]"));
}

TEST(Scoring, PromptLogprobsInVllmShape) {
  TextSide text = make_fake_text_side(4096);
  for (Endpoint ep : {Endpoint::completions, Endpoint::chat}) {
    AssemblerSetup s;
    s.endpoint = ep;
    s.meta = {"x-1", 1, "m"};
    s.prompt_tokens = 3;
    s.prompt_first = 256;  // BOS
    s.scored_prompt = 2;
    s.prompt_logprobs = 1;
    Assembler a(s, text);
    a.feed(event({tok('h', -0.5f, {{'h', -0.5f}, {'x', -1.0f}}), tok('i', -3.0f, {{'o', -0.25f}, {'a', -1.0f}})}));
    a.feed(event({tok('!', -1.0f)}, true, Finish::length));
    const json r = a.reply();
    const json expected = json::parse(R"([null,
      {"104": {"logprob": -0.5, "rank": 1, "decoded_token": "h"}},
      {"105": {"logprob": -3.0, "rank": null, "decoded_token": "i"},
       "111": {"logprob": -0.25, "rank": 1, "decoded_token": "o"}}])");
    if (ep == Endpoint::chat) {
      EXPECT_EQ(r["prompt_logprobs"], expected);
      EXPECT_EQ(r["choices"][0]["message"]["content"], "!");
    } else {
      EXPECT_EQ(r["choices"][0]["prompt_logprobs"], expected);
      EXPECT_EQ(r["choices"][0]["text"], "!");  // no echo: the prompt is not in the text
      EXPECT_TRUE(r["choices"][0]["logprobs"].is_null());
    }
    EXPECT_EQ(r["usage"]["completion_tokens"], 1);
  }
}

TEST(Scoring, SchemaTakesEchoAndPromptLogprobs) {
  SchemaLimits l;
  l.vocab_size = 1000;
  ParsedRequest out;
  ApiError e;
  ASSERT_TRUE(parse_request(Endpoint::completions,
                            R"({"prompt":[[5,6,7]],"echo":true,"max_tokens":0,"logprobs":1,"temperature":0,"seed":1234})",
                            l, out, e))
      << e.message;
  EXPECT_TRUE(out.echo);
  EXPECT_EQ(out.max_tokens, 0);
  EXPECT_EQ(out.top_logprobs, 1);
  EXPECT_EQ(out.prompt_ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(out.prompt_logprobs, -1);
  ASSERT_TRUE(parse_request(Endpoint::chat,
                            R"({"messages":[{"role":"user","content":"hi"}],"prompt_logprobs":0})", l, out, e));
  EXPECT_EQ(out.prompt_logprobs, 0);
  EXPECT_FALSE(out.echo);
}

}  // namespace
}  // namespace dsv4::server
