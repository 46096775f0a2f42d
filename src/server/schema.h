// Request schemas for /v1/chat/completions and /v1/completions: parse, validate, refuse early.
//
// Every refusal is a 4xx ApiError whose param names the offending field ("messages[1].content",
// "top_logprobs"). Unknown fields are ignored (clients send many); known fields of the wrong type
// or out of range are refused.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_error.h"
#include "server/engine.h"
#include "server/text_side.h"

namespace dsv4::server {

enum class Endpoint { chat, completions };

enum class ToolChoiceMode { none, automatic, required, named };

// response_format: free text, any JSON object, or a value held to a JSON Schema (structured_output.h).
enum class ResponseFormat { text, json_object, json_schema };

struct SchemaLimits {
  std::vector<std::string> model_names;  // accepted "model" values (empty: any)
  int32_t vocab_size = 0;                // token ids must be < this (0: unchecked)
  int32_t max_tokens = 4096;             // cap on max_tokens / max_completion_tokens
  int32_t max_top_logprobs = 20;
  int32_t max_stop = 16;                 // stop strings per request
  int32_t max_stop_bytes = 256;          // bytes per stop string
  int32_t max_messages = 4096;
  int32_t max_tools = 128;
  int32_t max_json_depth = 64;           // nesting depth of the whole body
  int32_t max_n = 16;                    // choices per request: n, and best_of on completions
  int32_t max_images = 8;                // image_url content parts per chat request
};

struct ParsedRequest {
  Endpoint endpoint = Endpoint::chat;
  std::string model;                   // as sent ("" when absent)
  bool stream = false;
  bool include_usage = false;
  std::optional<int32_t> max_tokens;   // absent: the server's default; 0 only with echo
  Sampling sampling;
  bool seed_given = false;
  std::vector<std::string> stop;
  bool logprobs = false;
  int32_t top_logprobs = 0;
  bool draft = true;
  bool ignore_eos = false;
  ResponseFormat response_format = ResponseFormat::text;  // json_schema: the schema is read in structured_output.cc
  // Choices (schema_choices.cc): the reply's n choices, drawn as the best n of best_of candidates
  // (ranked by the cumulative logprob of their generated tokens) when best_of > n.
  int32_t n = 1;
  int32_t best_of = 1;  // >= n; completions only (chat takes only 1)
  // forced_tokens: ids, or text to tokenize (forced_is_text).
  bool has_forced = false;
  bool forced_is_text = false;
  std::vector<int32_t> forced_ids;
  std::string forced_text;

  // Prompt scoring (schema_scoring.cc): each prompt token's logprob given its prefix, on the
  // forced_tokens path. echo (completions): the reply's text and logprobs start with the prompt's.
  bool echo = false;
  int32_t prompt_logprobs = -1;  // vLLM's prompt_logprobs: -1 absent, else alternatives per token

  // completions
  bool prompt_is_ids = false;
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;

  // chat: the body as sent (messages, tools, tool_choice ... validated), for TextSide::render_chat.
  nlohmann::json chat;
  bool tools_offered = false;
  std::vector<std::string> tool_names;  // offered, in order
  bool any_strict_tool = false;         // a tool with function.strict: true
  bool parallel_tool_calls = true;
  ToolChoiceMode tool_choice = ToolChoiceMode::automatic;
  std::vector<std::string> image_parts;  // where each image_url part is ("messages[1].content[0]"), in message order
  std::string tool_choice_name;
  ThinkingOptions thinking;
};

// Parses a request body. Returns false with `error` set (400 for malformed JSON or fields, 404 for
// an unknown model) and leaves `out` unspecified.
bool parse_request(Endpoint endpoint, std::string_view body, const SchemaLimits& limits,
                   ParsedRequest& out, ApiError& error);

// The same on an already-parsed JSON value (the body must be an object).
bool validate_request(Endpoint endpoint, const nlohmann::json& body, const SchemaLimits& limits,
                      ParsedRequest& out, ApiError& error);

// Nesting depth of a JSON value (scalars 0, [] 1), computed without recursion.
int32_t json_depth(const nlohmann::json& value);

}  // namespace dsv4::server
