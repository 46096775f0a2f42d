// Validation of chat and completions request bodies into ParsedRequest (see schema.h): the fields
// both endpoints share (model, sampling, limits, stop, logprobs, forced_tokens), the completions
// prompt, and the entry points. Chat's own fields are in schema_chat.cc, n and best_of in
// schema_choices.cc.
#include "server/schema.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <utility>

#include "server/schema_fields.h"

namespace dsv4::server {
namespace {

using json = nlohmann::json;
using fields::field;
using fields::in_range;
using fields::read_bool;
using fields::read_int;
using fields::read_number;
using fields::read_string;
using fields::read_token_ids;
using fields::wrong_type;

bool validate_prompt(const json& body, const SchemaLimits& limits, ParsedRequest& out, ApiError& e) {
  const json* p = field(body, "prompt");
  if (!p) return e = bad_request("prompt", "'prompt' is required"), false;
  const json* v = p;
  if (p->is_array() && !p->empty() && ((*p)[0].is_string() || (*p)[0].is_array())) {
    if (p->size() != 1)
      return e = bad_request("prompt", "only one prompt per request is served (n = 1)"), false;
    v = &(*p)[0];
  }
  if (v->is_string()) {
    out.prompt_text = v->get<std::string>();
    if (out.prompt_text.empty()) return e = bad_request("prompt", "'prompt' must not be empty"), false;
    return true;
  }
  if (v->is_array()) {
    if (v->empty()) return e = bad_request("prompt", "'prompt' must not be empty"), false;
    out.prompt_is_ids = true;
    return read_token_ids(*v, "prompt", limits, out.prompt_ids, e);
  }
  return e = wrong_type("prompt", "a string or an array of token ids", *p), false;
}

bool validate_common(Endpoint ep, const json& body, const SchemaLimits& limits, ParsedRequest& out,
                     ApiError& e) {
  std::optional<std::string> model, user;
  if (!read_string(body, "model", "model", model, e) || !read_string(body, "user", "user", user, e))
    return false;
  if (model) {
    out.model = *model;
    bool known = limits.model_names.empty();
    for (const auto& n : limits.model_names) known = known || n == *model;
    if (!known) {
      e = bad_request("model", fmt::format("The model '{}' does not exist; this server serves '{}'",
                                           *model, limits.model_names.front()),
                      "model_not_found");
      e.http_status = 404;
      return false;
    }
  }
  std::optional<bool> stream, draft, ignore_eos;
  if (!read_bool(body, "stream", "stream", stream, e) || !read_bool(body, "draft", "draft", draft, e) ||
      !read_bool(body, "ignore_eos", "ignore_eos", ignore_eos, e))
    return false;
  out.stream = stream.value_or(false);
  out.draft = draft.value_or(true);
  out.ignore_eos = ignore_eos.value_or(false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) return e = wrong_type("stream_options", "an object", *so), false;
    if (!out.stream)
      return e = bad_request("stream_options", "'stream_options' is only allowed when 'stream' is true"),
             false;
    std::optional<bool> usage;
    if (!read_bool(*so, "include_usage", "stream_options.include_usage", usage, e)) return false;
    out.include_usage = usage.value_or(false);
  }

  std::optional<int64_t> max_tokens, max_completion;
  // 0 passes here; validate_scoring allows it only with echo.
  if (!read_int(body, "max_tokens", "max_tokens", 0, limits.max_tokens, max_tokens, e) ||
      !read_int(body, "max_completion_tokens", "max_completion_tokens", 0, limits.max_tokens,
                max_completion, e))
    return false;
  if (max_completion) out.max_tokens = static_cast<int32_t>(*max_completion);
  else if (max_tokens) out.max_tokens = static_cast<int32_t>(*max_tokens);

  std::optional<double> temperature, top_p, min_p, presence, frequency, repetition;
  if (!read_number(body, "temperature", "temperature", temperature, e) ||
      !in_range(temperature, 0, 2, false, "temperature", e) ||
      !read_number(body, "top_p", "top_p", top_p, e) || !in_range(top_p, 0, 1, true, "top_p", e) ||
      !read_number(body, "min_p", "min_p", min_p, e) || !in_range(min_p, 0, 1, false, "min_p", e) ||
      !read_number(body, "presence_penalty", "presence_penalty", presence, e) ||
      !in_range(presence, -2, 2, false, "presence_penalty", e) ||
      !read_number(body, "frequency_penalty", "frequency_penalty", frequency, e) ||
      !in_range(frequency, -2, 2, false, "frequency_penalty", e) ||
      !read_number(body, "repetition_penalty", "repetition_penalty", repetition, e))
    return false;
  if ((presence && *presence != 0) || (frequency && *frequency != 0) ||
      (repetition && *repetition != 1)) {
    const char* p = presence && *presence != 0     ? "presence_penalty"
                    : frequency && *frequency != 0 ? "frequency_penalty"
                                                   : "repetition_penalty";
    return e = bad_request(p, fmt::format("'{}' is not supported by this server (the keyed sampler "
                                          "has no penalties); omit it",
                                          p),
                           "unsupported_parameter"),
           false;
  }
  if (min_p && *min_p >= 1)
    return e = bad_request("min_p", fmt::format("'min_p' must be below 1, got {}", *min_p)), false;
  if (temperature) out.sampling.temperature = static_cast<float>(*temperature);
  if (top_p) out.sampling.top_p = static_cast<float>(*top_p);
  if (min_p) out.sampling.min_p = static_cast<float>(*min_p);
  std::optional<int64_t> top_k, seed;
  int64_t vocab = limits.vocab_size > 0 ? limits.vocab_size : (int64_t{1} << 31) - 1;
  if (!read_int(body, "top_k", "top_k", -1, vocab, top_k, e)) return false;
  if (top_k) out.sampling.top_k = static_cast<int32_t>(*top_k);
  if (const json* s = field(body, "seed")) {
    if (s->is_number_unsigned()) {
      out.sampling.seed = s->get<uint64_t>();
    } else if (!read_int(body, "seed", "seed", std::numeric_limits<int64_t>::min(),
                         std::numeric_limits<int64_t>::max(), seed, e)) {
      return false;
    } else {
      out.sampling.seed = static_cast<uint64_t>(*seed);
    }
    out.seed_given = true;
  }

  if (const json* lb = field(body, "logit_bias")) {
    if (!lb->is_object()) return e = wrong_type("logit_bias", "an object", *lb), false;
    if (!lb->empty())
      return e = bad_request("logit_bias", "'logit_bias' is not supported by this server",
                             "unsupported_parameter"),
             false;
  }
  if (const json* rf = field(body, "response_format")) {
    if (!rf->is_object()) return e = wrong_type("response_format", "an object", *rf), false;
    auto t = rf->find("type");
    if (t == rf->end() || !t->is_string())
      return e = bad_request("response_format.type", "'response_format.type' must be a string"), false;
    if (*t == "text") {
      out.response_format = ResponseFormat::text;
    } else if (*t == "json_object") {
      out.response_format = ResponseFormat::json_object;
    } else if (*t == "json_schema") {
      auto js = rf->find("json_schema");
      if (js == rf->end() || !js->is_object())
        return e = bad_request("response_format.json_schema",
                               "response_format 'json_schema' needs a 'json_schema' object"),
               false;
      auto schema = js->find("schema");
      if (schema == js->end() || !(schema->is_object() || schema->is_boolean()))
        return e = bad_request("response_format.json_schema.schema",
                               "'response_format.json_schema.schema' must be a JSON Schema object"),
               false;
      auto strict = js->find("strict");
      if (strict != js->end() && !strict->is_boolean() && !strict->is_null())
        return e = wrong_type("response_format.json_schema.strict", "a boolean", *strict), false;
      out.response_format = ResponseFormat::json_schema;
    } else {
      return e = bad_request("response_format.type",
                             fmt::format("unknown response_format type '{}' (text, json_object or json_schema)",
                                         t->get<std::string>())),
             false;
    }
  }

  if (const json* stop = field(body, "stop")) {
    if (stop->is_string()) {
      out.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (static_cast<int64_t>(stop->size()) > limits.max_stop)
        return e = bad_request("stop", fmt::format("at most {} stop strings", limits.max_stop)), false;
      for (size_t i = 0; i < stop->size(); ++i) {
        if (!(*stop)[i].is_string())
          return e = wrong_type(fmt::format("stop[{}]", i), "a string", (*stop)[i]), false;
        out.stop.push_back((*stop)[i].get<std::string>());
      }
    } else {
      return e = wrong_type("stop", "a string or an array of strings", *stop), false;
    }
    for (size_t i = 0; i < out.stop.size(); ++i) {
      if (out.stop[i].empty()) return e = bad_request("stop", "stop strings must not be empty"), false;
      if (static_cast<int64_t>(out.stop[i].size()) > limits.max_stop_bytes)
        return e = bad_request("stop", fmt::format("stop strings are at most {} bytes",
                                                   limits.max_stop_bytes)),
               false;
    }
  }

  // logprobs: chat takes a boolean plus top_logprobs; completions an integer count.
  if (ep == Endpoint::chat) {
    std::optional<bool> logprobs;
    std::optional<int64_t> top;
    if (!read_bool(body, "logprobs", "logprobs", logprobs, e) ||
        !read_int(body, "top_logprobs", "top_logprobs", 0, limits.max_top_logprobs, top, e))
      return false;
    if (top && !logprobs.value_or(false))
      return e = bad_request("top_logprobs", "'top_logprobs' needs 'logprobs': true"), false;
    out.logprobs = logprobs.value_or(false);
    out.top_logprobs = static_cast<int32_t>(top.value_or(0));
  } else {
    std::optional<int64_t> logprobs;
    if (!read_int(body, "logprobs", "logprobs", 0, limits.max_top_logprobs, logprobs, e)) return false;
    if (field(body, "suffix"))
      return e = bad_request("suffix", "'suffix' is not supported by this server",
                             "unsupported_parameter"),
             false;
    out.logprobs = logprobs.has_value();
    out.top_logprobs = static_cast<int32_t>(logprobs.value_or(0));
  }

  if (const json* f = field(body, "forced_tokens")) {
    out.has_forced = true;
    if (f->is_string()) {
      out.forced_is_text = true;
      out.forced_text = f->get<std::string>();
      if (out.forced_text.empty())
        return e = bad_request("forced_tokens", "'forced_tokens' must not be empty"), false;
    } else if (f->is_array()) {
      if (f->empty()) return e = bad_request("forced_tokens", "'forced_tokens' must not be empty"), false;
      if (static_cast<int64_t>(f->size()) > limits.max_tokens)
        return e = bad_request("forced_tokens",
                               fmt::format("at most {} forced tokens", limits.max_tokens)),
               false;
      if (!read_token_ids(*f, "forced_tokens", limits, out.forced_ids, e)) return false;
    } else {
      return e = wrong_type("forced_tokens", "an array of token ids or a string", *f), false;
    }
  }
  return fields::validate_scoring(ep, body, limits, out, e) &&
         fields::validate_choices(ep, body, limits, out, e);
}

}  // namespace

int32_t json_depth(const json& value) {
  int32_t deepest = 0;
  std::vector<std::pair<const json*, int32_t>> todo{{&value, 0}};
  while (!todo.empty()) {
    auto [v, d] = todo.back();
    todo.pop_back();
    if (!v->is_structured()) continue;
    deepest = std::max(deepest, d + 1);
    for (const auto& child : *v) todo.push_back({&child, d + 1});
  }
  return deepest;
}

bool validate_request(Endpoint endpoint, const json& body, const SchemaLimits& limits,
                      ParsedRequest& out, ApiError& error) {
  out = ParsedRequest{};
  out.endpoint = endpoint;
  if (!body.is_object()) return error = bad_request("", "the request body must be a JSON object"), false;
  if (json_depth(body) > limits.max_json_depth)
    return error = bad_request("", fmt::format("the request nests deeper than {} levels",
                                               limits.max_json_depth)),
           false;
  if (!validate_common(endpoint, body, limits, out, error)) return false;
  if (endpoint == Endpoint::completions) return validate_prompt(body, limits, out, error);
  if (!fields::validate_chat(body, limits, out, error)) return false;
  out.chat = body;
  return true;
}

bool parse_request(Endpoint endpoint, std::string_view body, const SchemaLimits& limits,
                   ParsedRequest& out, ApiError& error) {
  json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded())
    return error = bad_request("", "the request body is not valid JSON", "invalid_json"), false;
  return validate_request(endpoint, parsed, limits, out, error);
}

}  // namespace dsv4::server
