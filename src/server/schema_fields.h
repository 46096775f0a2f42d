// Building blocks of request validation (schema.h), shared by the chat and completions parts:
// JSON field readers that refuse wrong types and ranges with the field's name, and the chat
// validator. Internal to the server module.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/schema.h"

namespace dsv4::server::fields {

using json = nlohmann::json;

// "'param' must be EXPECTED, got a string" (400, param set).
ApiError wrong_type(const std::string& param, const char* expected, const json& got);
// The value of `key`; absent or null gives nullptr.
const json* field(const json& obj, const char* key);

// Readers: absent or null leaves `out` empty and succeeds; a wrong type or range fails with `e`.
bool read_bool(const json& obj, const char* key, const std::string& param, std::optional<bool>& out,
               ApiError& e);
bool read_number(const json& obj, const char* key, const std::string& param,
                 std::optional<double>& out, ApiError& e);
// Integers may arrive as 5 or 5.0; anything fractional or outside [lo, hi] is refused.
bool read_int(const json& obj, const char* key, const std::string& param, int64_t lo, int64_t hi,
              std::optional<int64_t>& out, ApiError& e);
bool read_string(const json& obj, const char* key, const std::string& param,
                 std::optional<std::string>& out, ApiError& e);
// [lo, hi] or (lo, hi] when lo_open; absent passes.
bool in_range(std::optional<double> v, double lo, double hi, bool lo_open, const char* param,
              ApiError& e);
// Token id arrays: integers in [0, vocab).
bool read_token_ids(const json& arr, const std::string& param, const SchemaLimits& limits,
                    std::vector<int32_t>& out, ApiError& e);

// Chat-only fields (schema_chat.cc): messages, tools and tool_choice, thinking options.
bool validate_chat(const json& body, const SchemaLimits& limits, ParsedRequest& out, ApiError& e);

// Prompt scoring (schema_scoring.cc): echo (completions), prompt_logprobs, and the max_tokens 0 rule
// (allowed only with echo). Runs after the common fields.
bool validate_scoring(Endpoint ep, const json& body, const SchemaLimits& limits, ParsedRequest& out,
                      ApiError& e);

// n and best_of (schema_choices.cc). Runs last: it checks them against stream and the scoring
// fields.
bool validate_choices(Endpoint ep, const json& body, const SchemaLimits& limits, ParsedRequest& out,
                      ApiError& e);

}  // namespace dsv4::server::fields
