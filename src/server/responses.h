// OpenAI response shapes: chat.completion, text_completion, their SSE chunks, usage, logprobs.
//
// Pure builders (no I/O, no clocks): ids and timestamps are passed in so tests can compare exact
// JSON. Serialization replaces invalid UTF-8 (a token can end mid-character) with U+FFFD.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "server/engine.h"
#include "server/text_side.h"

namespace dsv4::server {

struct ResponseMeta {
  std::string id;       // "chatcmpl-…" or "cmpl-…"
  int64_t created = 0;  // unix seconds
  std::string model;
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;
  int32_t reasoning_tokens = -1;  // < 0: completion_tokens_details omitted
};

// One finished tool call of a non-streamed reply.
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;
};

struct ChatMessageOut {
  std::string content;
  std::string reasoning;  // "" -> reasoning_content omitted
  std::vector<ToolCall> tool_calls;
};

using TokenBytesFn = std::function<std::string(int32_t)>;

nlohmann::json usage_json(const Usage& usage);

// Chat shape, one entry: {"token", "logprob", "bytes", "token_id", "top_logprobs": [...]}.
nlohmann::json chat_logprob_entry(const TokenOut& token, const TokenBytesFn& bytes);
// Chat shape: {"content": [entries]}.
nlohmann::json chat_logprobs(const std::vector<TokenOut>& tokens, const TokenBytesFn& bytes);
// Completions shape: {"tokens", "token_logprobs", "top_logprobs", "text_offset", "token_ids"};
// text_offset[i] = text_offsets[i]: where the token's text starts in the choice's text, in
// characters (code points), as OpenAI and vLLM count. first_null: the first token is an echoed
// prompt's first, which has no logprob (its token_logprobs and top_logprobs entries are null).
nlohmann::json completion_logprobs(const std::vector<TokenOut>& tokens, const TokenBytesFn& bytes,
                                   int32_t top_n, const std::vector<int64_t>& text_offsets,
                                   bool first_null = false);
// vLLM's prompt_logprobs: [null, then per scored prompt token {"<id>": {"logprob", "rank",
// "decoded_token"}} holding the prompt token and its `top_n` best alternatives]. rank is 1-based
// among all tokens; the engine reports only the best top_n, so a prompt token outside them has
// rank null.
nlohmann::json prompt_logprobs_json(const std::vector<TokenOut>& scored, const TokenBytesFn& bytes,
                                    int32_t top_n);

nlohmann::json chat_completion(const ResponseMeta& meta, const ChatMessageOut& message,
                               const std::string& finish_reason, const nlohmann::json& logprobs,
                               const Usage& usage);
nlohmann::json text_completion(const ResponseMeta& meta, const std::string& text,
                               const std::string& finish_reason, const nlohmann::json& logprobs,
                               const Usage& usage);

// Stream chunks. `finish_reason` "" -> null; `include_usage` adds "usage": null as OpenAI does.
nlohmann::json chat_chunk(const ResponseMeta& meta, const nlohmann::json& delta,
                          const std::string& finish_reason, const nlohmann::json& logprobs,
                          bool include_usage);
nlohmann::json completion_chunk(const ResponseMeta& meta, const std::string& text,
                                const std::string& finish_reason, const nlohmann::json& logprobs,
                                bool include_usage);
// The final usage chunk: "choices": [] and the usage object.
nlohmann::json usage_chunk(const ResponseMeta& meta, bool chat, const Usage& usage);
// A streamed delta in OpenAI's shape: {"tool_calls": [{"index", "id", "type", "function"}]}.
nlohmann::json tool_calls_delta(const std::vector<ToolCallDelta>& calls);

// Serialization that never throws: invalid UTF-8 becomes U+FFFD.
std::string dump_json(const nlohmann::json& value);
std::string sse_event(const nlohmann::json& value);  // "data: {...}\n\n"
inline const char* sse_done() { return "data: [DONE]\n\n"; }
inline const char* sse_keepalive() { return ": keepalive\n\n"; }

const char* finish_reason_name(Finish finish);  // stop, length, cancelled, error

}  // namespace dsv4::server
