// Chat request fields: messages (roles, content parts, tool calls), tools and tool_choice, and the
// thinking options (thinking, chat_template_kwargs, reasoning_effort).
#include <fmt/format.h>

#include <cctype>

#include "server/schema_fields.h"

namespace dsv4::server::fields {
namespace {

bool valid_tool_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'))
      return false;
  return true;
}

// An image_url part: {"type": "image_url", "image_url": {"url": "...", "detail": "auto"|"low"|"high"}} (or the URL as a
// string). detail is accepted and has no effect: the model's processor has one resolution rule.
bool validate_image_part(const json& part, const std::string& pp, const SchemaLimits& limits, ParsedRequest& out,
                         ApiError& e) {
  auto iu = part.find("image_url");
  const std::string param = pp + ".image_url";
  if (iu == part.end() || !(iu->is_string() || iu->is_object()))
    return e = bad_request(param, fmt::format("'{}' must be an object {{\"url\": string}}", param)), false;
  if (iu->is_object()) {
    auto url = iu->find("url");
    if (url == iu->end() || !url->is_string())
      return e = bad_request(param + ".url", fmt::format("'{}.url' must be a string", param)), false;
    if (const json* detail = field(*iu, "detail")) {
      if (!detail->is_string() || !(*detail == "auto" || *detail == "low" || *detail == "high"))
        return e = bad_request(param + ".detail", "image detail must be 'auto', 'low' or 'high'"), false;
    }
  }
  if (static_cast<int64_t>(out.image_parts.size()) >= limits.max_images)
    return e = bad_request(pp, fmt::format("at most {} images per request", limits.max_images), "too_many_images"),
           false;
  out.image_parts.push_back(pp);
  return true;
}

bool validate_content(const json& msg, const std::string& p, bool nullable, const SchemaLimits& limits,
                      ParsedRequest& out, ApiError& e) {
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
    if (*type == "image_url") {
      if (!validate_image_part(part, pp, limits, out, e)) return false;
      continue;
    }
    if (*type != "text")
      return e = bad_request(pp + ".type",
                             fmt::format("content part type '{}' is not supported by this server "
                                         "(only 'text' and 'image_url')",
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
    if (args != fn->end() && !args->is_string() && !args->is_object() && !args->is_null())
      return e = wrong_type(pc + ".function.arguments", "a JSON string, an object or null", *args), false;
  }
  return true;
}

bool validate_messages(const json& body, const SchemaLimits& limits, ParsedRequest& out, ApiError& e) {
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
      if (!validate_content(m, p, false, limits, out, e)) return false;
    } else if (*role == "assistant") {
      auto calls = m.find("tool_calls");
      bool has_calls = calls != m.end() && !calls->is_null();
      if (has_calls && !validate_tool_calls(*calls, p + ".tool_calls", e)) return false;
      if (!validate_content(m, p, true, limits, out, e)) return false;
      std::optional<std::string> reasoning;
      if (!read_string(m, "reasoning_content", p + ".reasoning_content", reasoning, e) ||
          !read_string(m, "reasoning", p + ".reasoning", reasoning, e))
        return false;
    } else if (*role == "tool") {
      std::optional<std::string> call_id;
      if (!read_string(m, "tool_call_id", p + ".tool_call_id", call_id, e)) return false;
      if (!call_id)
        return e = bad_request(p + ".tool_call_id", "tool messages need 'tool_call_id'"), false;
      if (!validate_content(m, p, false, limits, out, e)) return false;
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
      out.any_strict_tool = out.any_strict_tool || strict.value_or(false);
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
  if (!read_bool(body, "parallel_tool_calls", "parallel_tool_calls", parallel, e)) return false;
  out.parallel_tool_calls = parallel.value_or(true);
  return true;
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

}  // namespace

bool validate_chat(const json& body, const SchemaLimits& limits, ParsedRequest& out, ApiError& e) {
  return validate_messages(body, limits, out, e) && validate_tools(body, limits, out, e) &&
         validate_thinking(body, out, e);
}

}  // namespace dsv4::server::fields
