// Validation of chat and completions request bodies into ParsedRequest (see schema.h).
#include "server/schema.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <utility>

namespace dsv4::server {
namespace {

using json = nlohmann::json;

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float: return "a number";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "an unsupported value";
  }
}

ApiError wrong_type(const std::string& param, const char* expected, const json& got) {
  return bad_request(param, fmt::format("'{}' must be {}, got {}", param, expected, type_name(got)));
}

// Field readers: absent or null leaves `out` empty and succeeds.
const json* field(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

bool read_bool(const json& obj, const char* key, const std::string& param, std::optional<bool>& out,
               ApiError& e) {
  const json* v = field(obj, key);
  if (!v) return true;
  if (!v->is_boolean()) return e = wrong_type(param, "a boolean", *v), false;
  out = v->get<bool>();
  return true;
}

bool read_number(const json& obj, const char* key, const std::string& param,
                 std::optional<double>& out, ApiError& e) {
  const json* v = field(obj, key);
  if (!v) return true;
  if (!v->is_number()) return e = wrong_type(param, "a number", *v), false;
  out = v->get<double>();
  return true;
}

// Integers may arrive as 5 or 5.0; anything fractional or outside [lo, hi] is refused.
bool read_int(const json& obj, const char* key, const std::string& param, int64_t lo, int64_t hi,
              std::optional<int64_t>& out, ApiError& e) {
  const json* v = field(obj, key);
  if (!v) return true;
  int64_t value = 0;
  if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(hi))
      return e = bad_request(param, fmt::format("'{}' must be at most {}, got {}", param, hi, u)),
             false;
    value = static_cast<int64_t>(u);
  } else if (v->is_number_integer()) {
    value = v->get<int64_t>();
  } else if (v->is_number_float()) {
    double d = v->get<double>();
    if (d != std::floor(d) || d < -9.2e18 || d > 9.2e18)
      return e = bad_request(param, fmt::format("'{}' must be an integer, got {}", param, d)), false;
    value = static_cast<int64_t>(d);
  } else {
    return e = wrong_type(param, "an integer", *v), false;
  }
  if (value < lo || value > hi)
    return e = bad_request(param, fmt::format("'{}' must be between {} and {}, got {}", param, lo,
                                              hi, value)),
           false;
  out = value;
  return true;
}

bool read_string(const json& obj, const char* key, const std::string& param,
                 std::optional<std::string>& out, ApiError& e) {
  const json* v = field(obj, key);
  if (!v) return true;
  if (!v->is_string()) return e = wrong_type(param, "a string", *v), false;
  out = v->get<std::string>();
  return true;
}

bool in_range(std::optional<double> v, double lo, double hi, bool lo_open, const char* param,
              ApiError& e) {
  if (!v) return true;
  bool ok = (lo_open ? *v > lo : *v >= lo) && *v <= hi;
  if (!ok)
    e = bad_request(param, fmt::format("'{}' must be in {}{}, {}], got {}", param,
                                       lo_open ? "(" : "[", lo, hi, *v));
  return ok;
}

// Token id arrays: integers in [0, vocab).
bool read_token_ids(const json& arr, const std::string& param, const SchemaLimits& limits,
                    std::vector<int32_t>& out, ApiError& e) {
  out.clear();
  out.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    const json& t = arr[i];
    std::string p = fmt::format("{}[{}]", param, i);
    if (!t.is_number_integer() && !t.is_number_unsigned())
      return e = wrong_type(p, "an integer token id", t), false;
    int64_t id = t.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(
                                              t.get<uint64_t>(), uint64_t{1} << 62))
                                        : t.get<int64_t>();
    int64_t hi = limits.vocab_size > 0 ? limits.vocab_size : std::numeric_limits<int32_t>::max();
    if (id < 0 || id >= hi)
      return e = bad_request(p, fmt::format("token id {} is outside the vocabulary [0, {})", id, hi)),
             false;
    out.push_back(static_cast<int32_t>(id));
  }
  return true;
}

bool valid_tool_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'))
      return false;
  return true;
}

bool validate_content(const json& msg, const std::string& p, bool nullable, ApiError& e) {
  auto it = msg.find("content");
  std::string param = p + ".content";
  if (it == msg.end() || it->is_null()) {
    if (nullable) return true;
    return e = bad_request(param, fmt::format("'{}' is required", param)), false;
  }
  if (it->is_string()) return true;
  if (!it->is_array()) return e = wrong_type(param, "a string or an array of content parts", *it), false;
  for (size_t j = 0; j < it->size(); ++j) {
    const json& part = (*it)[j];
    std::string pp = fmt::format("{}[{}]", param, j);
    if (!part.is_object()) return e = wrong_type(pp, "an object", part), false;
    auto type = part.find("type");
    if (type == part.end() || !type->is_string())
      return e = bad_request(pp + ".type", fmt::format("'{}.type' must be a string", pp)), false;
    if (*type != "text")
      return e = bad_request(pp + ".type",
                             fmt::format("content part type '{}' is not supported by this server "
                                         "(only 'text')",
                                         type->get<std::string>()),
                             "unsupported_content"),
             false;
    auto text = part.find("text");
    if (text == part.end() || !text->is_string())
      return e = bad_request(pp + ".text", fmt::format("'{}.text' must be a string", pp)), false;
  }
  return true;
}

bool validate_tool_calls(const json& calls, const std::string& p, ApiError& e) {
  if (!calls.is_array()) return e = wrong_type(p, "an array", calls), false;
  for (size_t k = 0; k < calls.size(); ++k) {
    const json& c = calls[k];
    std::string pc = fmt::format("{}[{}]", p, k);
    if (!c.is_object()) return e = wrong_type(pc, "an object", c), false;
    std::optional<std::string> id, type;
    if (!read_string(c, "id", pc + ".id", id, e) || !read_string(c, "type", pc + ".type", type, e))
      return false;
    if (type && *type != "function")
      return e = bad_request(pc + ".type", "tool call type must be 'function'"), false;
    auto fn = c.find("function");
    if (fn == c.end() || !fn->is_object())
      return e = bad_request(pc + ".function", fmt::format("'{}.function' must be an object", pc)),
             false;
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string())
      return e = bad_request(pc + ".function.name", "tool call function name must be a string"),
             false;
    auto args = fn->find("arguments");
    if (args != fn->end() && !args->is_string() && !args->is_object())
      return e = wrong_type(pc + ".function.arguments", "a JSON string", *args), false;
  }
  return true;
}

bool validate_messages(const json& body, const SchemaLimits& limits, ApiError& e) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null())
    return e = bad_request("messages", "'messages' is required"), false;
  if (!it->is_array()) return e = wrong_type("messages", "an array", *it), false;
  if (it->empty()) return e = bad_request("messages", "'messages' must not be empty"), false;
  if (static_cast<int64_t>(it->size()) > limits.max_messages)
    return e = bad_request("messages", fmt::format("at most {} messages", limits.max_messages)),
           false;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    std::string p = fmt::format("messages[{}]", i);
    if (!m.is_object()) return e = wrong_type(p, "an object", m), false;
    std::optional<std::string> role, name;
    if (!read_string(m, "role", p + ".role", role, e) || !read_string(m, "name", p + ".name", name, e))
      return false;
    if (!role) return e = bad_request(p + ".role", fmt::format("'{}.role' is required", p)), false;
    if (*role == "system" || *role == "developer" || *role == "user") {
      if (!validate_content(m, p, false, e)) return false;
    } else if (*role == "assistant") {
      auto calls = m.find("tool_calls");
      bool has_calls = calls != m.end() && !calls->is_null();
      if (has_calls && !validate_tool_calls(*calls, p + ".tool_calls", e)) return false;
      if (!validate_content(m, p, true, e)) return false;
      std::optional<std::string> reasoning;
      if (!read_string(m, "reasoning_content", p + ".reasoning_content", reasoning, e)) return false;
    } else if (*role == "tool") {
      std::optional<std::string> call_id;
      if (!read_string(m, "tool_call_id", p + ".tool_call_id", call_id, e)) return false;
      if (!call_id)
        return e = bad_request(p + ".tool_call_id", "tool messages need 'tool_call_id'"), false;
      if (!validate_content(m, p, false, e)) return false;
    } else {
      return e = bad_request(p + ".role",
                             fmt::format("unknown role '{}' (system, developer, user, assistant, "
                                         "tool)",
                                         *role)),
             false;
    }
  }
  return true;
}

bool validate_tools(const json& body, const SchemaLimits& limits, ParsedRequest& out, ApiError& e) {
  std::vector<std::string> names;
  if (const json* tools = field(body, "tools")) {
    if (!tools->is_array()) return e = wrong_type("tools", "an array", *tools), false;
    if (static_cast<int64_t>(tools->size()) > limits.max_tools)
      return e = bad_request("tools", fmt::format("at most {} tools", limits.max_tools)), false;
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      std::string p = fmt::format("tools[{}]", i);
      if (!t.is_object()) return e = wrong_type(p, "an object", t), false;
      std::optional<std::string> type;
      if (!read_string(t, "type", p + ".type", type, e)) return false;
      if (type != "function")
        return e = bad_request(p + ".type", "tool type must be 'function'"), false;
      auto fn = t.find("function");
      if (fn == t.end() || !fn->is_object())
        return e = bad_request(p + ".function", fmt::format("'{}.function' must be an object", p)),
               false;
      std::optional<std::string> name, desc;
      std::optional<bool> strict;
      if (!read_string(*fn, "name", p + ".function.name", name, e) ||
          !read_string(*fn, "description", p + ".function.description", desc, e) ||
          !read_bool(*fn, "strict", p + ".function.strict", strict, e))
        return false;
      if (!name || !valid_tool_name(*name))
        return e = bad_request(p + ".function.name",
                               "function name must be 1-64 characters of a-z, A-Z, 0-9, _, - or ."),
               false;
      const json* params = field(*fn, "parameters");
      if (params && !params->is_object())
        return e = wrong_type(p + ".function.parameters", "a JSON Schema object", *params), false;
      names.push_back(*name);
    }
  }
  out.tools_offered = !names.empty();
  out.tool_names = names;
  if (const json* choice = field(body, "tool_choice")) {
    if (choice->is_string()) {
      std::string c = choice->get<std::string>();
      if (c == "none") out.tool_choice = ToolChoiceMode::none;
      else if (c == "auto") out.tool_choice = ToolChoiceMode::automatic;
      else if (c == "required") out.tool_choice = ToolChoiceMode::required;
      else
        return e = bad_request("tool_choice",
                               fmt::format("unknown tool_choice '{}' (none, auto, required, or "
                                           "{{\"type\":\"function\",\"function\":{{\"name\":...}}}})",
                                           c)),
               false;
    } else if (choice->is_object()) {
      auto fn = choice->find("function");
      if (fn == choice->end() || !fn->is_object() || !fn->contains("name") ||
          !(*fn)["name"].is_string())
        return e = bad_request("tool_choice.function.name", "named tool_choice needs function.name"),
               false;
      out.tool_choice = ToolChoiceMode::named;
      out.tool_choice_name = (*fn)["name"].get<std::string>();
      bool known = false;
      for (const auto& n : names) known = known || n == out.tool_choice_name;
      if (!known)
        return e = bad_request("tool_choice.function.name",
                               fmt::format("tool_choice names '{}', which is not in 'tools'",
                                           out.tool_choice_name)),
               false;
    } else {
      return e = wrong_type("tool_choice", "a string or an object", *choice), false;
    }
    if ((out.tool_choice == ToolChoiceMode::required) && names.empty())
      return e = bad_request("tool_choice", "tool_choice 'required' needs 'tools'"), false;
  }
  std::optional<bool> parallel;
  return read_bool(body, "parallel_tool_calls", "parallel_tool_calls", parallel, e);
}

// thinking: bool or {"type": "enabled"|"disabled"} (DeepSeek API), at top level or in
// chat_template_kwargs; enable_thinking: bool; reasoning_effort: a named level.
bool read_thinking_value(const json& v, const std::string& param, std::optional<bool>& out,
                         ApiError& e) {
  if (v.is_boolean()) return out = v.get<bool>(), true;
  if (v.is_object()) {
    auto t = v.find("type");
    if (t != v.end() && t->is_string() && (*t == "enabled" || *t == "disabled"))
      return out = (*t == "enabled"), true;
    return e = bad_request(param + ".type", "thinking.type must be 'enabled' or 'disabled'"), false;
  }
  return e = wrong_type(param, "a boolean or {\"type\": \"enabled\"|\"disabled\"}", v), false;
}

bool read_effort(const json& v, const std::string& param, std::string& out, ApiError& e) {
  static const char* kLevels[] = {"none", "minimal", "low", "medium", "high", "xhigh", "max"};
  if (!v.is_string()) return e = wrong_type(param, "a string", v), false;
  for (const char* l : kLevels)
    if (v == l) return out = l, true;
  return e = bad_request(param, fmt::format("unknown reasoning_effort '{}' (none, minimal, low, "
                                            "medium, high, xhigh, max)",
                                            v.get<std::string>())),
         false;
}

bool validate_thinking(const json& body, ParsedRequest& out, ApiError& e) {
  ThinkingOptions& t = out.thinking;
  if (const json* v = field(body, "thinking"))
    if (!read_thinking_value(*v, "thinking", t.enabled, e)) return false;
  if (const json* v = field(body, "reasoning_effort"))
    if (!read_effort(*v, "reasoning_effort", t.effort, e)) return false;
  if (const json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) return e = wrong_type("chat_template_kwargs", "an object", *kw), false;
    if (const json* v = field(*kw, "thinking"))
      if (!read_thinking_value(*v, "chat_template_kwargs.thinking", t.enabled, e)) return false;
    if (const json* v = field(*kw, "enable_thinking")) {
      if (!v->is_boolean())
        return e = wrong_type("chat_template_kwargs.enable_thinking", "a boolean", *v), false;
      t.enabled = v->get<bool>();
    }
    if (const json* v = field(*kw, "reasoning_effort"))
      if (!read_effort(*v, "chat_template_kwargs.reasoning_effort", t.effort, e)) return false;
  }
  if (!t.enabled && (t.effort == "none" || t.effort == "minimal")) t.enabled = false;
  return true;
}

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
  std::optional<int64_t> n, best_of;
  if (!read_int(body, "n", "n", 1, 1 << 20, n, e)) return false;
  if (n && *n != 1) return e = bad_request("n", "only n = 1 is supported"), false;
  if (!read_int(body, "best_of", "best_of", 1, 1 << 20, best_of, e)) return false;
  if (best_of && *best_of != 1) return e = bad_request("best_of", "only best_of = 1 is supported"), false;

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
  if (!read_int(body, "max_tokens", "max_tokens", 1, limits.max_tokens, max_tokens, e) ||
      !read_int(body, "max_completion_tokens", "max_completion_tokens", 1, limits.max_tokens,
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
    if (*t != "text")
      return e = bad_request("response_format.type",
                             fmt::format("response_format '{}' is not supported by this server yet",
                                         t->get<std::string>()),
                             "unsupported_parameter"),
             false;
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
    std::optional<bool> echo;
    if (!read_int(body, "logprobs", "logprobs", 0, limits.max_top_logprobs, logprobs, e) ||
        !read_bool(body, "echo", "echo", echo, e))
      return false;
    if (echo.value_or(false))
      return e = bad_request("echo", "'echo' is not supported by this server", "unsupported_parameter"),
             false;
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
  return true;
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
  if (!validate_messages(body, limits, error) || !validate_tools(body, limits, out, error) ||
      !validate_thinking(body, out, error))
    return false;
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
