// Reply shapes against hand-written JSON in the OpenAI API reference's shapes (chat.completion,
// chat.completion.chunk, text_completion, usage with prompt_tokens_details, logprobs), and the
// stop-string and assembly rules on hand-worked examples.
#include <gtest/gtest.h>

#include "server/assembler.h"
#include "server/fake_engine.h"
#include "server/responses.h"
#include "server/stop_text.h"

namespace dsv4::server {
namespace {

using json = nlohmann::json;

std::string bytes_of(int32_t t) { return t < 256 ? std::string(1, char(t)) : "</s>"; }

TEST(Responses, ChatCompletionExact) {
  ResponseMeta m{"chatcmpl-1", 1700000000, "m1"};
  ChatMessageOut msg;
  msg.content = "Hi";
  msg.reasoning = "think";
  Usage u{10, 3, 4, 1};
  json j = chat_completion(m, msg, "stop", nullptr, u);
  EXPECT_EQ(j, json::parse(R"({
    "id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": "m1",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi",
                 "reasoning_content": "think"}, "logprobs": null, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13,
              "prompt_tokens_details": {"cached_tokens": 4},
              "completion_tokens_details": {"reasoning_tokens": 1}}})"));
}

TEST(Responses, ToolCallReplyHasNullContent) {
  ResponseMeta m{"chatcmpl-2", 5, "m1"};
  ChatMessageOut msg;
  msg.tool_calls.push_back({"call_1", "get_weather", "{\"city\":\"Paris\"}"});
  json j = chat_completion(m, msg, "tool_calls", nullptr, Usage{1, 2, 0, -1});
  EXPECT_EQ(j["choices"][0]["message"], json::parse(R"({"role": "assistant", "content": null,
    "tool_calls": [{"id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]})"));
  EXPECT_FALSE(j["usage"].contains("completion_tokens_details"));
}

TEST(Responses, ChunksExact) {
  ResponseMeta m{"chatcmpl-3", 7, "m1"};
  EXPECT_EQ(sse_event(chat_chunk(m, {{"content", "x"}}, "", nullptr, true)),
            "data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":null,\"index\":0,"
            "\"logprobs\":null}],\"created\":7,\"id\":\"chatcmpl-3\",\"model\":\"m1\",\"object\":"
            "\"chat.completion.chunk\",\"usage\":null}\n\n");
  EXPECT_EQ(usage_chunk(m, true, Usage{2, 1, 0, 0}), json::parse(R"({
    "id": "chatcmpl-3", "object": "chat.completion.chunk", "created": 7, "model": "m1",
    "choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3,
    "prompt_tokens_details": {"cached_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0}}})"));
  EXPECT_EQ(completion_chunk(m, "ab", "length", nullptr, false), json::parse(R"({
    "id": "chatcmpl-3", "object": "text_completion", "created": 7, "model": "m1",
    "choices": [{"index": 0, "text": "ab", "logprobs": null, "finish_reason": "length"}]})"));
  std::vector<ToolCallDelta> calls(2);
  calls[0] = {0, "call_a", "f", ""};
  calls[1] = {0, "", "", "{\"x\":"};
  EXPECT_EQ(tool_calls_delta(calls), json::parse(R"({"tool_calls": [
    {"index": 0, "id": "call_a", "type": "function", "function": {"name": "f", "arguments": ""}},
    {"index": 0, "function": {"arguments": "{\"x\":"}}]})"));
}

TEST(Responses, LogprobShapes) {
  TokenOut a;
  a.token = 'h';
  a.logprob = -0.25f;  // exactly representable
  a.top = {{'h', -0.25f}, {'j', -1.5f}};
  TokenOut b;
  b.token = 'i';
  b.logprob = -0.1f;  // serialized by its shortest decimal form
  EXPECT_EQ(chat_logprobs({a}, bytes_of), json::parse(R"({"content": [
    {"token": "h", "logprob": -0.25, "bytes": [104], "token_id": 104, "top_logprobs": [
      {"token": "h", "logprob": -0.25, "bytes": [104], "token_id": 104},
      {"token": "j", "logprob": -1.5, "bytes": [106], "token_id": 106}]}]})"));
  EXPECT_EQ(completion_logprobs({a, b}, bytes_of, 2, {3, 4}), json::parse(R"({
    "tokens": ["h", "i"], "token_logprobs": [-0.25, -0.1],
    "top_logprobs": [{"h": -0.25, "j": -1.5}, {}], "text_offset": [3, 4],
    "token_ids": [104, 105]})"));
  // An echoed prompt's first token has no logprob; alternatives are cut to top_n.
  EXPECT_EQ(completion_logprobs({b, a}, bytes_of, 1, {0, 1}, true), json::parse(R"({
    "tokens": ["i", "h"], "token_logprobs": [null, -0.25],
    "top_logprobs": [null, {"h": -0.25}], "text_offset": [0, 1],
    "token_ids": [105, 104]})"));
  EXPECT_EQ(dump_json(json(std::string("\xE4\xBD"))), "\"\xEF\xBF\xBD\"");  // partial char -> U+FFFD
}

TEST(StopHold, HoldsTheLongestSuffixThatMayStartAStopString) {
  const std::vector<std::string> stops = {"END", "xyz"};
  EXPECT_EQ(stop_hold_length("abcE", stops), 1u);   // "E" may start END
  EXPECT_EQ(stop_hold_length("abcEN", stops), 2u);  // "EN" still may
  EXPECT_EQ(stop_hold_length("abcENQ", stops), 0u); // not END after all
  EXPECT_EQ(stop_hold_length("1xy", stops), 2u);    // "xy" may start xyz
  EXPECT_EQ(stop_hold_length("", stops), 0u);
  EXPECT_EQ(stop_hold_length("aa", {"aab"}), 2u);   // the longest prefix wins
  EXPECT_EQ(stop_hold_length("a", {"a"}), 0u);      // a whole stop string is the engine's match
}

GenerationEvent tokens_event(const std::string& text, bool done = false, Finish f = Finish::none) {
  GenerationEvent e;
  for (unsigned char c : text) {
    TokenOut t;
    t.token = c;
    t.logprob = -0.5f;
    e.tokens.push_back(t);
  }
  e.done = done;
  e.finish = f;
  return e;
}

TEST(Assembler, StopStringAcrossEventsCutsWhereTheEngineMatched) {
  TextSide text = make_fake_text_side(4096);
  AssemblerSetup s;
  s.endpoint = Endpoint::completions;
  s.meta = {"cmpl-1", 1, "m"};
  s.stream = true;
  s.stop = {"STOP"};
  s.logprobs = true;
  s.prompt_tokens = 5;
  Assembler a(s, text);
  // "ST" may start STOP: held back.
  std::string sse = a.feed(tokens_event("hello ST"));
  EXPECT_NE(sse.find("\"text\":\"hello \""), std::string::npos) << sse;
  EXPECT_FALSE(a.finished());
  // The engine's match of STOP starts at byte 6; the event whose last token completed it ends the
  // reply.
  GenerationEvent last = tokens_event("OP", true, Finish::stop);
  last.stop_offset = 6;
  sse = a.feed(last);
  ASSERT_TRUE(a.finished());
  EXPECT_FALSE(a.ended_early());
  EXPECT_EQ(sse.find("STOP"), std::string::npos);
  EXPECT_EQ(sse.find("\"text\":\"OP"), std::string::npos);
  EXPECT_EQ(a.finish_reason(), "stop");
  // Every delivered token counts: "hello STOP" = 10 tokens.
  EXPECT_EQ(a.usage().completion_tokens, 10);
}

TEST(Assembler, StopStringCutInsideAToken) {
  // Not streamed; tokens here are single bytes, so cut "ab|c": the match "bc" starts at byte 1.
  TextSide text = make_fake_text_side(4096);
  AssemblerSetup s;
  s.endpoint = Endpoint::completions;
  s.meta = {"cmpl-2", 1, "m"};
  s.stop = {"bc"};
  s.logprobs = true;
  Assembler a(s, text);
  a.feed(tokens_event("a"));
  GenerationEvent last = tokens_event("bc", true, Finish::stop);
  last.stop_offset = 1;
  a.feed(last);
  json r = a.reply();
  EXPECT_EQ(r["choices"][0]["text"], "a");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  // Logprobs cover the tokens that began before the match: "a".
  EXPECT_EQ(r["choices"][0]["logprobs"]["tokens"].size(), 1u);
}

TEST(Assembler, ForcedCallEndsWithTheCallBlock) {
  // The prompt ends with "<tool>f " (the fake markup's call opening); the model writes the
  // arguments, closes the call, then text: the reply is the call, finish_reason tool_calls.
  TextSide text = make_fake_text_side(4096);
  AssemblerSetup s;
  s.endpoint = Endpoint::chat;
  s.meta = {"chatcmpl-7", 1, "m"};
  s.tools = true;
  s.forced_call = true;
  s.call_opening = text.tool_call_opening("f");
  Assembler a(s, text);
  a.feed(tokens_event("{\"x\":1}</tool>and then some"));
  ASSERT_TRUE(a.finished());
  EXPECT_TRUE(a.ended_early());
  json r = a.reply();
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
  const json& m = r["choices"][0]["message"];
  ASSERT_EQ(m["tool_calls"].size(), 1u);
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], "{\"x\":1}");
  EXPECT_TRUE(m["content"].is_null() || m["content"] == "") << m.dump();
}

TEST(Assembler, ThinkingAndToolCallsStream) {
  TextSide text = make_fake_text_side(4096);
  AssemblerSetup s;
  s.endpoint = Endpoint::chat;
  s.meta = {"chatcmpl-9", 1, "m"};
  s.stream = true;
  s.thinking = true;
  s.tools = true;
  Assembler a(s, text);
  std::string sse = a.feed(tokens_event("ok</think>Hi<tool>f {\"a\":"));
  sse += a.feed(tokens_event("1}</tool>", true, Finish::stop));
  sse += a.finish_sse();
  std::vector<json> chunks;
  size_t at = 0;
  while ((at = sse.find("data: ", at)) != std::string::npos) {
    size_t end = sse.find("\n\n", at);
    std::string data = sse.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") break;
    chunks.push_back(json::parse(data));
  }
  ASSERT_EQ(chunks.size(), 6u);
  EXPECT_EQ(chunks[0]["choices"][0]["delta"], json::parse(R"({"role":"assistant","content":""})"));
  EXPECT_EQ(chunks[1]["choices"][0]["delta"], json::parse(R"({"reasoning_content":"ok"})"));
  EXPECT_EQ(chunks[2]["choices"][0]["delta"], json::parse(R"({"content":"Hi"})"));
  EXPECT_EQ(chunks[3]["choices"][0]["delta"], json::parse(R"({"tool_calls":[
    {"index":0,"id":"call_9_0","type":"function","function":{"name":"f","arguments":"{\"a\":"}}]})"));
  EXPECT_EQ(chunks[4]["choices"][0]["delta"], json::parse(R"({"tool_calls":[
    {"index":0,"function":{"arguments":"1}"}}]})"));
  EXPECT_EQ(chunks[5]["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(sse.substr(sse.size() - 14), "data: [DONE]\n\n");
  // 25 tokens in the first event, 9 in the second (one byte each).
  EXPECT_EQ(a.usage().completion_tokens, 34);
  // Reasoning: the tokens before the first content, "ok</think>" = 10.
  EXPECT_EQ(a.usage().reasoning_tokens, 10);
}

TEST(Assembler, ReasoningCountsTokensThatReleaseNoText) {
  // Thinking on, max_tokens reached inside the reasoning: "hm", then the fake side's EOS (kFakeEos,
  // no output bytes), drawn because EOS was ignored. All three tokens were released before any
  // content, so all three are reasoning tokens (the last one decodes to no text at all).
  TextSide text = make_fake_text_side(4096);
  AssemblerSetup s;
  s.endpoint = Endpoint::chat;
  s.meta = {"chatcmpl-r", 1, "m"};
  s.thinking = true;
  Assembler a(s, text);
  GenerationEvent e = tokens_event("hm");
  TokenOut eos;
  eos.token = kFakeEos;
  eos.logprob = -0.5f;
  e.tokens.push_back(eos);
  e.done = true;
  e.finish = Finish::length;
  a.feed(e);
  ASSERT_TRUE(a.finished());
  EXPECT_EQ(a.usage().completion_tokens, 3);
  EXPECT_EQ(a.usage().reasoning_tokens, 3);
  EXPECT_EQ(a.reply()["choices"][0]["message"]["reasoning_content"], "hm");
}

TEST(Assembler, EngineErrorBecomesAnErrorEvent) {
  TextSide text = make_fake_text_side(4096);
  AssemblerSetup s;
  s.endpoint = Endpoint::chat;
  s.meta = {"chatcmpl-e", 1, "m"};
  s.stream = true;
  Assembler a(s, text);
  GenerationEvent e;
  e.done = true;
  e.finish = Finish::error;
  e.error = Status(StatusCode::unavailable, "halted");
  a.feed(e);
  EXPECT_EQ(a.finish_sse(),
            "data: {\"error\":{\"code\":\"unavailable\",\"message\":\"halted\",\"param\":null,"
            "\"type\":\"service_unavailable\"}}\n\ndata: [DONE]\n\n");
}

}  // namespace
}  // namespace dsv4::server
