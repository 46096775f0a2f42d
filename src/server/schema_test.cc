// Request validation: every refusal names its field with the right status; accepted requests
// carry exactly the fields sent. Expected values are the OpenAI API's documented rules.
#include "server/schema.h"

#include <gtest/gtest.h>

namespace dsv4::server {
namespace {

SchemaLimits limits() {
  SchemaLimits l;
  l.model_names = {"m1", "alias"};
  l.vocab_size = 1000;
  l.max_tokens = 512;
  return l;
}

struct Bad {
  Endpoint endpoint;
  std::string body;
  int status;
  const char* param;
};

const char* kChatOk = R"("messages":[{"role":"user","content":"hi"}])";

TEST(Schema, RefusesBadRequestsNamingTheField) {
  std::string ok = kChatOk;
  const Bad cases[] = {
      {Endpoint::chat, "{", 400, nullptr},
      {Endpoint::chat, "[1,2]", 400, nullptr},
      {Endpoint::chat, "\"x\"", 400, nullptr},
      {Endpoint::chat, "{}", 400, "messages"},
      {Endpoint::chat, R"({"messages":[]})", 400, "messages"},
      {Endpoint::chat, R"({"messages":"hi"})", 400, "messages"},
      {Endpoint::chat, R"({"messages":[1]})", 400, "messages[0]"},
      {Endpoint::chat, R"({"messages":[{"content":"x"}]})", 400, "messages[0].role"},
      {Endpoint::chat, R"({"messages":[{"role":"wizard","content":"x"}]})", 400, "messages[0].role"},
      {Endpoint::chat, R"({"messages":[{"role":"user"}]})", 400, "messages[0].content"},
      {Endpoint::chat, R"({"messages":[{"role":"user","content":5}]})", 400, "messages[0].content"},
      {Endpoint::chat, R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})",
       400, "messages[0].content[0].image_url.url"},
      {Endpoint::chat, R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":5}]}]})",
       400, "messages[0].content[0].image_url"},
      {Endpoint::chat,
       R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x","detail":"max"}}]}]})",
       400, "messages[0].content[0].image_url.detail"},
      {Endpoint::chat, R"({"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}]})",
       400, "messages[0].content[0].type"},
      {Endpoint::chat, R"({"messages":[{"role":"tool","content":"r"}]})", 400,
       "messages[0].tool_call_id"},
      {Endpoint::chat,
       R"({"messages":[{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":1}}]}]})",
       400, "messages[0].tool_calls[0].function.name"},
      {Endpoint::chat, "{" + ok + R"(,"model":"nope"})", 404, "model"},
      {Endpoint::chat, "{" + ok + R"(,"model":7})", 400, "model"},
      {Endpoint::chat, "{" + ok + R"(,"n":0})", 400, "n"},
      {Endpoint::chat, "{" + ok + R"(,"n":17})", 400, "n"},
      {Endpoint::chat, "{" + ok + R"(,"n":1.5})", 400, "n"},
      {Endpoint::chat, "{" + ok + R"(,"best_of":2})", 400, "best_of"},
      {Endpoint::chat, "{" + ok + R"(,"n":2,"forced_tokens":[1]})", 400, "n"},
      {Endpoint::chat, "{" + ok + R"(,"n":2,"prompt_logprobs":0})", 400, "n"},
      {Endpoint::chat, "{" + ok + R"(,"n":"1"})", 400, "n"},
      {Endpoint::chat, "{" + ok + R"(,"stream":"yes"})", 400, "stream"},
      {Endpoint::chat, "{" + ok + R"(,"stream_options":{"include_usage":true}})", 400,
       "stream_options"},
      {Endpoint::chat, "{" + ok + R"(,"stream":true,"stream_options":{"include_usage":1}})", 400,
       "stream_options.include_usage"},
      {Endpoint::chat, "{" + ok + R"(,"max_tokens":0})", 400, "max_tokens"},
      {Endpoint::chat, "{" + ok + R"(,"max_tokens":513})", 400, "max_tokens"},
      {Endpoint::chat, "{" + ok + R"(,"max_tokens":1.5})", 400, "max_tokens"},
      {Endpoint::chat, "{" + ok + R"(,"max_completion_tokens":-3})", 400, "max_completion_tokens"},
      {Endpoint::chat, "{" + ok + R"(,"max_tokens":99999999999999999999})", 400, "max_tokens"},
      {Endpoint::chat, "{" + ok + R"(,"temperature":2.5})", 400, "temperature"},
      {Endpoint::chat, "{" + ok + R"(,"temperature":"hot"})", 400, "temperature"},
      {Endpoint::chat, "{" + ok + R"(,"top_p":0})", 400, "top_p"},
      {Endpoint::chat, "{" + ok + R"(,"top_p":1.01})", 400, "top_p"},
      {Endpoint::chat, "{" + ok + R"(,"top_k":-2})", 400, "top_k"},
      {Endpoint::chat, "{" + ok + R"(,"top_k":1001})", 400, "top_k"},
      {Endpoint::chat, "{" + ok + R"(,"min_p":1.5})", 400, "min_p"},
      {Endpoint::chat, "{" + ok + R"(,"min_p":1})", 400, "min_p"},
      {Endpoint::chat, "{" + ok + R"(,"seed":"abc"})", 400, "seed"},
      {Endpoint::chat, "{" + ok + R"(,"seed":0.5})", 400, "seed"},
      {Endpoint::chat, "{" + ok + R"(,"stop":5})", 400, "stop"},
      {Endpoint::chat, "{" + ok + R"(,"stop":[""]})", 400, "stop"},
      {Endpoint::chat, "{" + ok + R"(,"stop":["a",3]})", 400, "stop[1]"},
      {Endpoint::chat, "{" + ok + R"(,"logprobs":1})", 400, "logprobs"},
      {Endpoint::chat, "{" + ok + R"(,"top_logprobs":3})", 400, "top_logprobs"},
      {Endpoint::chat, "{" + ok + R"(,"logprobs":true,"top_logprobs":21})", 400, "top_logprobs"},
      {Endpoint::chat, "{" + ok + R"(,"presence_penalty":0.5})", 400, "presence_penalty"},
      {Endpoint::chat, "{" + ok + R"(,"frequency_penalty":3})", 400, "frequency_penalty"},
      {Endpoint::chat, "{" + ok + R"(,"logit_bias":{"5":1}})", 400, "logit_bias"},
      {Endpoint::chat, "{" + ok + R"(,"response_format":{"type":"xml"}})", 400, "response_format.type"},
      {Endpoint::chat, "{" + ok + R"(,"response_format":{"type":"json_schema"}})", 400,
       "response_format.json_schema"},
      {Endpoint::chat, "{" + ok + R"(,"response_format":{"type":"json_schema","json_schema":{"schema":3}}})", 400,
       "response_format.json_schema.schema"},
      {Endpoint::chat,
       "{" + ok + R"(,"response_format":{"type":"json_schema","json_schema":{"schema":{},"strict":"yes"}}})", 400,
       "response_format.json_schema.strict"},
      {Endpoint::chat, "{" + ok + R"(,"tools":{}})", 400, "tools"},
      {Endpoint::chat, "{" + ok + R"(,"tools":[{"type":"function","function":{"name":"a b"}}]})",
       400, "tools[0].function.name"},
      {Endpoint::chat,
       "{" + ok + R"(,"tools":[{"type":"function","function":{"name":"f","parameters":3}}]})", 400,
       "tools[0].function.parameters"},
      {Endpoint::chat, "{" + ok + R"(,"tool_choice":"sometimes"})", 400, "tool_choice"},
      {Endpoint::chat, "{" + ok + R"(,"tool_choice":"required"})", 400, "tool_choice"},
      {Endpoint::chat,
       "{" + ok +
           R"(,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}})",
       400, "tool_choice.function.name"},
      {Endpoint::chat, "{" + ok + R"(,"reasoning_effort":"extreme"})", 400, "reasoning_effort"},
      {Endpoint::chat, "{" + ok + R"(,"chat_template_kwargs":[]})", 400, "chat_template_kwargs"},
      {Endpoint::chat, "{" + ok + R"(,"chat_template_kwargs":{"thinking":"on"}})", 400,
       "chat_template_kwargs.thinking"},
      {Endpoint::chat, "{" + ok + R"(,"thinking":{"type":"maybe"}})", 400, "thinking.type"},
      {Endpoint::chat, "{" + ok + R"(,"forced_tokens":[]})", 400, "forced_tokens"},
      {Endpoint::chat, "{" + ok + R"(,"forced_tokens":[1,1000]})", 400, "forced_tokens[1]"},
      {Endpoint::chat, "{" + ok + R"(,"forced_tokens":[-1]})", 400, "forced_tokens[0]"},
      {Endpoint::chat, "{" + ok + R"(,"forced_tokens":{"a":1}})", 400, "forced_tokens"},
      {Endpoint::chat, "{" + ok + R"(,"draft":"no"})", 400, "draft"},
      {Endpoint::chat,
       R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":[1]}}]}]})", 400,
       "messages[0].tool_calls[0].function.arguments"},
      {Endpoint::chat, R"({"messages":[{"role":"assistant","content":"a","reasoning":7}]})", 400,
       "messages[0].reasoning"},
      {Endpoint::completions, "{}", 400, "prompt"},
      {Endpoint::completions, R"({"prompt":""})", 400, "prompt"},
      {Endpoint::completions, R"({"prompt":["a","b"]})", 400, "prompt"},
      {Endpoint::completions, R"({"prompt":[1,"x"]})", 400, "prompt[1]"},
      {Endpoint::completions, R"({"prompt":[5,1000]})", 400, "prompt[1]"},
      {Endpoint::completions, R"({"prompt":{"text":"a"}})", 400, "prompt"},
      {Endpoint::completions, R"({"prompt":"a","logprobs":true})", 400, "logprobs"},
      {Endpoint::completions, R"({"prompt":"a","logprobs":21})", 400, "logprobs"},
      {Endpoint::completions, R"({"prompt":"a","echo":"yes"})", 400, "echo"},
      {Endpoint::completions, R"({"prompt":"a","max_tokens":0})", 400, "max_tokens"},
      {Endpoint::completions, R"({"prompt":"a","max_completion_tokens":0,"echo":false})", 400,
       "max_completion_tokens"},
      {Endpoint::completions, R"({"prompt":"a","prompt_logprobs":21})", 400, "prompt_logprobs"},
      {Endpoint::completions, R"({"prompt":"a","prompt_logprobs":-1})", 400, "prompt_logprobs"},
      {Endpoint::completions, R"({"prompt":"a","prompt_logprobs":1,"stream":true})", 400,
       "prompt_logprobs"},
      {Endpoint::chat, "{" + ok + R"(,"prompt_logprobs":1.5})", 400, "prompt_logprobs"},
      {Endpoint::chat, "{" + ok + R"(,"max_tokens":0,"echo":true})", 400, "max_tokens"},
      {Endpoint::completions, R"({"prompt":"a","suffix":"z"})", 400, "suffix"},
      {Endpoint::completions, R"({"prompt":"a","best_of":17})", 400, "best_of"},
      {Endpoint::completions, R"({"prompt":"a","best_of":0})", 400, "best_of"},
      {Endpoint::completions, R"({"prompt":"a","n":3,"best_of":2})", 400, "best_of"},
      {Endpoint::completions, R"({"prompt":"a","n":2,"best_of":3,"stream":true})", 400, "best_of"},
      {Endpoint::completions, R"({"prompt":"a","best_of":2,"echo":true})", 400, "best_of"},
      {Endpoint::completions, R"({"prompt":"a","n":2,"echo":true})", 400, "n"},
  };
  for (const Bad& c : cases) {
    ParsedRequest out;
    ApiError e;
    EXPECT_FALSE(parse_request(c.endpoint, c.body, limits(), out, e)) << c.body;
    EXPECT_EQ(e.http_status, c.status) << c.body;
    EXPECT_EQ(e.param, c.param ? c.param : "") << c.body << " -> " << e.message;
    EXPECT_EQ(e.type, "invalid_request_error") << c.body;
    EXPECT_FALSE(e.message.empty());
  }
}

TEST(Schema, DeepNestingIsRefusedNotRecursedInto) {
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  std::string body = "{" + std::string(kChatOk) + R"(,"metadata":)" + deep + "}";
  ParsedRequest out;
  ApiError e;
  EXPECT_FALSE(parse_request(Endpoint::chat, body, limits(), out, e));
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(json_depth(nlohmann::json::parse("[[1],{\"a\":[2]}]")), 3);
  EXPECT_EQ(json_depth(nlohmann::json::parse("5")), 0);
}

TEST(Schema, AcceptsAFullChatRequest) {
  const char* body = R"({
    "model": "alias", "messages": [
      {"role": "system", "content": "s"},
      {"role": "user", "content": [{"type": "text", "text": "q"}]},
      {"role": "assistant", "content": null, "reasoning_content": "r",
       "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "42"},
      {"role": "assistant", "content": null, "reasoning": "r2",
       "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}},
                      {"id": "c3", "type": "function", "function": {"name": "f", "arguments": null}}]},
      {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "1"}]},
      {"role": "tool", "tool_call_id": "c3", "content": "2"}],
    "stream": true, "stream_options": {"include_usage": true},
    "max_completion_tokens": 100, "max_tokens": 7, "temperature": 0, "top_p": 0.5, "top_k": 40,
    "min_p": 0.1, "seed": 18446744073709551615, "stop": ["END", "##"], "n": 1,
    "logprobs": true, "top_logprobs": 20, "presence_penalty": 0, "logit_bias": {},
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "tool_choice": {"type": "function", "function": {"name": "f"}},
    "chat_template_kwargs": {"thinking": true, "reasoning_effort": "max"},
    "draft": false, "forced_tokens": [1, 2, 999], "user": "u", "unknown_field": {"x": 1}})";
  ParsedRequest r;
  ApiError e;
  ASSERT_TRUE(parse_request(Endpoint::chat, body, limits(), r, e)) << e.message;
  EXPECT_EQ(r.model, "alias");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.max_tokens, 100);  // max_completion_tokens wins over max_tokens
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_EQ(r.sampling.top_p, 0.5f);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_EQ(r.sampling.min_p, 0.1f);
  EXPECT_EQ(r.sampling.seed, 18446744073709551615ull);
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"END", "##"}));
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 20);
  EXPECT_TRUE(r.tools_offered);
  EXPECT_EQ(r.tool_choice, ToolChoiceMode::named);
  EXPECT_EQ(r.tool_choice_name, "f");
  EXPECT_EQ(r.thinking.enabled, true);
  EXPECT_EQ(r.thinking.effort, "max");
  EXPECT_FALSE(r.draft);
  EXPECT_EQ(r.forced_ids, (std::vector<int32_t>{1, 2, 999}));
  EXPECT_EQ(r.chat["messages"].size(), 7u);
}

TEST(Schema, ThinkingForms) {
  auto thinking = [](const std::string& extra) {
    ParsedRequest r;
    ApiError e;
    std::string body = "{" + std::string(kChatOk) + extra + "}";
    EXPECT_TRUE(parse_request(Endpoint::chat, body, limits(), r, e)) << e.message;
    return r.thinking;
  };
  EXPECT_FALSE(thinking("").enabled.has_value());
  EXPECT_EQ(thinking(R"(,"thinking":{"type":"disabled"})").enabled, false);
  EXPECT_EQ(thinking(R"(,"thinking":{"type":"enabled"})").enabled, true);
  EXPECT_EQ(thinking(R"(,"chat_template_kwargs":{"enable_thinking":false})").enabled, false);
  EXPECT_EQ(thinking(R"(,"reasoning_effort":"none")").enabled, false);
  EXPECT_EQ(thinking(R"(,"reasoning_effort":"high")").effort, "high");
  EXPECT_FALSE(thinking(R"(,"reasoning_effort":"high")").enabled.has_value());
}

TEST(Schema, ChoiceCounts) {
  const auto parse = [](Endpoint ep, const std::string& body) {
    ParsedRequest r;
    ApiError e;
    EXPECT_TRUE(parse_request(ep, body, limits(), r, e)) << body << " -> " << e.message;
    return std::pair<int32_t, int32_t>{r.n, r.best_of};
  };
  const std::string chat = std::string("{") + kChatOk;
  EXPECT_EQ(parse(Endpoint::chat, chat + "}"), std::make_pair(1, 1));
  EXPECT_EQ(parse(Endpoint::chat, chat + R"(,"n":16,"stream":true})"), std::make_pair(16, 16));
  EXPECT_EQ(parse(Endpoint::chat, chat + R"(,"n":3,"best_of":1.0})").first, 3);
  EXPECT_EQ(parse(Endpoint::chat, chat + R"(,"n":null,"best_of":null})"), std::make_pair(1, 1));
  EXPECT_EQ(parse(Endpoint::completions, R"({"prompt":"a","n":2})"), std::make_pair(2, 2));
  EXPECT_EQ(parse(Endpoint::completions, R"({"prompt":"a","best_of":3})"), std::make_pair(1, 3));
  EXPECT_EQ(parse(Endpoint::completions, R"({"prompt":"a","n":2,"best_of":16})"), std::make_pair(2, 16));
  EXPECT_EQ(parse(Endpoint::completions, R"({"prompt":"a","n":4,"best_of":4,"stream":true})"),
            std::make_pair(4, 4));
  // The limit is the server's.
  SchemaLimits wide = limits();
  wide.max_n = 32;
  ParsedRequest r;
  ApiError e;
  EXPECT_TRUE(parse_request(Endpoint::completions, R"({"prompt":"a","n":17,"best_of":32})", wide, r, e))
      << e.message;
  EXPECT_FALSE(parse_request(Endpoint::completions, R"({"prompt":"a","n":33})", wide, r, e));
  EXPECT_EQ(e.param, "n");
}

TEST(Schema, CompletionPromptForms) {
  ParsedRequest r;
  ApiError e;
  ASSERT_TRUE(parse_request(Endpoint::completions, R"({"prompt":"hello"})", limits(), r, e));
  EXPECT_EQ(r.prompt_text, "hello");
  EXPECT_FALSE(r.prompt_is_ids);
  EXPECT_FALSE(r.logprobs);
  ASSERT_TRUE(parse_request(Endpoint::completions, R"({"prompt":["hi"],"logprobs":0})", limits(), r, e));
  EXPECT_EQ(r.prompt_text, "hi");
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 0);
  ASSERT_TRUE(parse_request(Endpoint::completions, R"({"prompt":[[1,2,3]],"logprobs":5})", limits(), r, e));
  EXPECT_TRUE(r.prompt_is_ids);
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(r.top_logprobs, 5);
  ASSERT_TRUE(parse_request(Endpoint::completions, R"({"prompt":[7],"max_tokens":5.0,"seed":-1})",
                            limits(), r, e));
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_EQ(r.sampling.seed, 18446744073709551615ull);  // -1 as a 64-bit key
}

TEST(Schema, ErrorJsonShape) {
  ApiError e = bad_request("top_logprobs", "too many");
  EXPECT_EQ(e.body(),
            R"({"error":{"code":null,"message":"too many","param":"top_logprobs","type":"invalid_request_error"}})");
  ApiError q = error_from_status(Status(StatusCode::resource_exhausted, "full"));
  EXPECT_EQ(q.http_status, 429);
  EXPECT_EQ(q.body(), R"({"error":{"code":"queue_full","message":"full","param":null,"type":"rate_limit_error"}})");
  EXPECT_EQ(error_from_status(Status(StatusCode::unavailable, "x")).http_status, 503);
}

}  // namespace
}  // namespace dsv4::server
