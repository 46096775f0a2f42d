// Builders for OpenAI reply objects and SSE chunks (see responses.h).
#include "server/responses.h"

#include <fmt/format.h>

#include <cstdlib>

namespace dsv4::server {
namespace {

using json = nlohmann::json;

// A token's text as a JSON string: its bytes, with invalid UTF-8 replaced when serialized.
json bytes_array(const std::string& s) {
  json a = json::array();
  for (unsigned char c : s) a.push_back(static_cast<int>(c));
  return a;
}

// A float logprob as the double with the float's shortest decimal form (-0.1f -> -0.1, not
// -0.10000000149011612); it converts back to the same float.
double lp(float v) { return std::strtod(fmt::format("{}", v).c_str(), nullptr); }

json nullable(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

json base(const ResponseMeta& meta, const char* object) {
  return json{{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

}  // namespace

const char* finish_reason_name(Finish finish) {
  switch (finish) {
    case Finish::stop: return "stop";
    case Finish::length: return "length";
    case Finish::cancelled: return "cancelled";
    case Finish::error: return "error";
    case Finish::none: break;
  }
  return "none";
}

std::string dump_json(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string sse_event(const json& value) { return "data: " + dump_json(value) + "\n\n"; }

json usage_json(const Usage& u) {
  json j{{"prompt_tokens", u.prompt_tokens},
         {"completion_tokens", u.completion_tokens},
         {"total_tokens", u.prompt_tokens + u.completion_tokens},
         {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
  if (u.reasoning_tokens >= 0)
    j["completion_tokens_details"] = {{"reasoning_tokens", u.reasoning_tokens}};
  return j;
}

json chat_logprob_entry(const TokenOut& t, const TokenBytesFn& bytes) {
  std::string b = bytes(t.token);
  json top = json::array();
  for (const auto& alt : t.top) {
    std::string ab = bytes(alt.token);
    top.push_back({{"token", ab}, {"logprob", lp(alt.logprob)}, {"bytes", bytes_array(ab)},
                   {"token_id", alt.token}});
  }
  return json{{"token", b}, {"logprob", lp(t.logprob)}, {"bytes", bytes_array(b)},
              {"token_id", t.token}, {"top_logprobs", std::move(top)}};
}

json chat_logprobs(const std::vector<TokenOut>& tokens, const TokenBytesFn& bytes) {
  json content = json::array();
  for (const auto& t : tokens) content.push_back(chat_logprob_entry(t, bytes));
  return json{{"content", std::move(content)}};
}

json completion_logprobs(const std::vector<TokenOut>& tokens, const TokenBytesFn& bytes,
                         int32_t top_n, const std::vector<int64_t>& text_offsets, bool first_null) {
  json toks = json::array(), lps = json::array(), tops = json::array(), offs = json::array(),
       ids = json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    const TokenOut& t = tokens[i];
    const bool null_entry = first_null && i == 0;
    toks.push_back(bytes(t.token));
    lps.push_back(null_entry ? json(nullptr) : json(lp(t.logprob)));
    offs.push_back(i < text_offsets.size() ? text_offsets[i] : 0);
    ids.push_back(t.token);
    if (top_n > 0) {
      if (null_entry) {
        tops.push_back(nullptr);
        continue;
      }
      json m = json::object();
      for (size_t a = 0; a < t.top.size() && a < static_cast<size_t>(top_n); ++a) {
        std::string key = bytes(t.top[a].token);
        if (!m.contains(key)) m[key] = lp(t.top[a].logprob);  // best first: keep the higher of equal texts
      }
      tops.push_back(std::move(m));
    }
  }
  return json{{"tokens", std::move(toks)},
              {"token_logprobs", std::move(lps)},
              {"top_logprobs", top_n > 0 ? std::move(tops) : json(nullptr)},
              {"text_offset", std::move(offs)},
              {"token_ids", std::move(ids)}};
}

json prompt_logprobs_json(const std::vector<TokenOut>& scored, const TokenBytesFn& bytes,
                          int32_t top_n) {
  json out = json::array({nullptr});
  for (const TokenOut& t : scored) {
    json entry = json::object();
    json rank = nullptr;
    for (size_t a = 0; a < t.top.size(); ++a)
      if (t.top[a].token == t.token) rank = static_cast<int64_t>(a + 1);
    entry[std::to_string(t.token)] = {{"logprob", lp(t.logprob)}, {"rank", rank},
                                      {"decoded_token", bytes(t.token)}};
    for (size_t a = 0; a < t.top.size() && a < static_cast<size_t>(top_n); ++a) {
      const std::string key = std::to_string(t.top[a].token);
      if (!entry.contains(key))
        entry[key] = {{"logprob", lp(t.top[a].logprob)}, {"rank", static_cast<int64_t>(a + 1)},
                      {"decoded_token", bytes(t.top[a].token)}};
    }
    out.push_back(std::move(entry));
  }
  return out;
}

json chat_completion(const ResponseMeta& meta, const ChatMessageOut& m,
                     const std::string& finish_reason, const json& logprobs, const Usage& usage) {
  json message{{"role", "assistant"}};
  message["content"] = m.content.empty() && !m.tool_calls.empty() ? json(nullptr) : json(m.content);
  if (!m.reasoning.empty()) message["reasoning_content"] = m.reasoning;
  if (!m.tool_calls.empty()) {
    json calls = json::array();
    for (const auto& c : m.tool_calls)
      calls.push_back({{"id", c.id},
                       {"type", "function"},
                       {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    message["tool_calls"] = std::move(calls);
  }
  json r = base(meta, "chat.completion");
  r["choices"] = json::array({json{{"index", 0},
                                   {"message", std::move(message)},
                                   {"logprobs", logprobs},
                                   {"finish_reason", nullable(finish_reason)}}});
  r["usage"] = usage_json(usage);
  return r;
}

json text_completion(const ResponseMeta& meta, const std::string& text,
                     const std::string& finish_reason, const json& logprobs, const Usage& usage) {
  json r = base(meta, "text_completion");
  r["choices"] = json::array({json{{"index", 0},
                                   {"text", text},
                                   {"logprobs", logprobs},
                                   {"finish_reason", nullable(finish_reason)}}});
  r["usage"] = usage_json(usage);
  return r;
}

json chat_chunk(const ResponseMeta& meta, const json& delta, const std::string& finish_reason,
                const json& logprobs, bool include_usage) {
  json r = base(meta, "chat.completion.chunk");
  r["choices"] = json::array({json{{"index", 0},
                                   {"delta", delta},
                                   {"logprobs", logprobs},
                                   {"finish_reason", nullable(finish_reason)}}});
  if (include_usage) r["usage"] = nullptr;
  return r;
}

json completion_chunk(const ResponseMeta& meta, const std::string& text,
                      const std::string& finish_reason, const json& logprobs, bool include_usage) {
  json r = base(meta, "text_completion");
  r["choices"] = json::array({json{{"index", 0},
                                   {"text", text},
                                   {"logprobs", logprobs},
                                   {"finish_reason", nullable(finish_reason)}}});
  if (include_usage) r["usage"] = nullptr;
  return r;
}

json usage_chunk(const ResponseMeta& meta, bool chat, const Usage& usage) {
  json r = base(meta, chat ? "chat.completion.chunk" : "text_completion");
  r["choices"] = json::array();
  r["usage"] = usage_json(usage);
  return r;
}

json tool_calls_delta(const std::vector<ToolCallDelta>& calls) {
  json arr = json::array();
  for (const auto& c : calls) {
    json fn = json::object();
    if (!c.name.empty()) fn["name"] = c.name;
    fn["arguments"] = c.arguments;
    json entry{{"index", c.index}};
    if (!c.id.empty()) {
      entry["id"] = c.id;
      entry["type"] = "function";
    }
    entry["function"] = std::move(fn);
    arr.push_back(std::move(entry));
  }
  return json{{"tool_calls", std::move(arr)}};
}

}  // namespace dsv4::server
