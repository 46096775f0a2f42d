// OpenAI request JSON -> Conversation, refusing malformed fields by name.
#include "tokenizer/chat_openai.h"

#include <string>

#include "tokenizer/chat_pyjson.h"
#include "tokenizer/chat_template.h"

namespace dsv4::chat {
namespace {

using Json = nlohmann::ordered_json;

Status field_error(const std::string& field, std::string_view what) {
  return error(StatusCode::invalid_argument, "{}: {}", field, what);
}

StatusOr<std::vector<ContentPart>> parse_content(const Json& content, const std::string& field) {
  std::vector<ContentPart> parts;
  if (content.is_null()) return parts;
  if (content.is_string()) {
    parts.push_back({ContentPart::Kind::text, content.get<std::string>(), "", ""});
    return parts;
  }
  if (!content.is_array()) return field_error(field, "expected string or array of text parts");
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string pf = field + "[" + std::to_string(i) + "]";
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      return field_error(pf, "expected an object with a string \"type\"");
    const std::string type = part["type"].get<std::string>();
    if (type == "text") {
      if (!part.contains("text") || !part["text"].is_string())
        return field_error(pf + ".text", "expected a string");
      parts.push_back({ContentPart::Kind::text, part["text"].get<std::string>(), "", ""});
    } else if (type == "image_url") {
      const Json* url = nullptr;
      if (part.contains("image_url")) {
        const Json& iu = part["image_url"];
        if (iu.is_string()) url = &iu;
        else if (iu.is_object() && iu.contains("url") && iu["url"].is_string()) url = &iu["url"];
      }
      if (!url) return field_error(pf + ".image_url", "expected {\"url\": string}");
      parts.push_back({ContentPart::Kind::image, "", url->get<std::string>(), pf});
    } else {
      return field_error(pf + ".type", "unsupported content part '" + type +
                                           "' (text and image_url are supported)");
    }
  }
  return parts;
}

StatusOr<std::vector<ToolCall>> parse_tool_calls(const Json& calls, const std::string& field) {
  std::vector<ToolCall> out;
  if (calls.is_null()) return out;
  if (!calls.is_array()) return field_error(field, "expected an array");
  for (size_t i = 0; i < calls.size(); ++i) {
    const Json& c = calls[i];
    const std::string cf = field + "[" + std::to_string(i) + "]";
    if (!c.is_object()) return field_error(cf, "expected an object");
    ToolCall tc;
    if (c.contains("id") && !c["id"].is_null()) {
      if (!c["id"].is_string()) return field_error(cf + ".id", "expected a string");
      tc.id = c["id"].get<std::string>();
    }
    if (!c.contains("function") || !c["function"].is_object())
      return field_error(cf + ".function", "expected an object with name and arguments");
    const Json& f = c["function"];
    if (!f.contains("name") || !f["name"].is_string())
      return field_error(cf + ".function.name", "expected a string");
    tc.name = f["name"].get<std::string>();
    // A call without arguments: missing, null or an empty string (clients send each) is the empty object.
    tc.arguments = "{}";
    if (f.contains("arguments")) {
      const Json& a = f["arguments"];
      if (a.is_string()) {
        const std::string& text = a.get_ref<const std::string&>();
        if (text.find_first_not_of(" \t\r\n") != std::string::npos) tc.arguments = text;
      } else if (a.is_object()) {
        tc.arguments = python_json_dumps(a);
      } else if (!a.is_null()) {
        return field_error(cf + ".function.arguments", "expected a JSON string, an object or null");
      }
    }
    out.push_back(std::move(tc));
  }
  return out;
}

StatusOr<Message> parse_message(const Json& m, size_t index) {
  const std::string field = "messages[" + std::to_string(index) + "]";
  if (!m.is_object()) return field_error(field, "expected an object");
  if (!m.contains("role") || !m["role"].is_string())
    return field_error(field + ".role", "expected a string");
  const std::string role = m["role"].get<std::string>();
  Message msg;
  if (role == "system") msg.role = Role::system;
  else if (role == "developer") msg.role = Role::developer;
  else if (role == "user") msg.role = Role::user;
  else if (role == "assistant") msg.role = Role::assistant;
  else if (role == "tool") msg.role = Role::tool;
  else
    return field_error(field + ".role", "unknown role '" + role +
                                            "' (system, developer, user, assistant, tool)");
  if (m.contains("content")) {
    DSV4_ASSIGN_OR_RETURN(msg.content, parse_content(m["content"], field + ".content"));
  }
  for (const char* key : {"reasoning_content", "reasoning"}) {
    if (!m.contains(key) || m[key].is_null() || msg.reasoning_content) continue;
    if (!m[key].is_string()) return field_error(field + "." + key, "expected a string");
    msg.reasoning_content = m[key].get<std::string>();
  }
  if (m.contains("tool_calls")) {
    if (msg.role != Role::assistant && !m["tool_calls"].is_null())
      return field_error(field + ".tool_calls", "only assistant messages carry tool_calls");
    DSV4_ASSIGN_OR_RETURN(msg.tool_calls, parse_tool_calls(m["tool_calls"], field + ".tool_calls"));
  }
  if (msg.role == Role::tool && m.contains("tool_call_id") && !m["tool_call_id"].is_null()) {
    if (!m["tool_call_id"].is_string())
      return field_error(field + ".tool_call_id", "expected a string");
    msg.tool_call_id = m["tool_call_id"].get<std::string>();
  }
  return msg;
}

StatusOr<bool> read_bool(const Json& obj, const char* key, const std::string& field) {
  if (!obj[key].is_boolean()) return field_error(field, "expected true or false");
  return obj[key].get<bool>();
}

// Applies a reasoning_effort value: a name or an integer budget 1..100.
Status apply_effort(const Json& v, const std::string& field, ChatOptions& o) {
  if (v.is_null()) return ok_status();
  if (v.is_number_integer() || v.is_number_unsigned()) {
    const int64_t budget = v.get<int64_t>();
    if (budget < 1 || budget > 100) return field_error(field, "an integer budget must be 1..100");
    if (o.format == ChatFormat::v4)
      return field_error(field, "integer budgets need the V4.1 chat format (use high or max)");
    o.reasoning_effort = static_cast<int32_t>(budget);
    return ok_status();
  }
  if (!v.is_string()) return field_error(field, "expected a string or an integer 1..100");
  auto budget = reasoning_effort_from_name(v.get<std::string>());
  if (!budget.ok()) return field_error(field, budget.status().message());
  if (*budget == 0) o.thinking = false;
  else o.reasoning_effort = *budget;
  return ok_status();
}

}  // namespace

StatusOr<Conversation> conversation_from_openai(const Json& request, ChatFormat format) {
  if (!request.is_object()) return field_error("request", "expected a JSON object");
  Conversation conv;
  conv.options.format = format;
  if (!request.contains("messages") || !request["messages"].is_array() ||
      request["messages"].empty())
    return field_error("messages", "expected a non-empty array");
  const Json& msgs = request["messages"];
  for (size_t i = 0; i < msgs.size(); ++i) {
    DSV4_ASSIGN_OR_RETURN(Message m, parse_message(msgs[i], i));
    conv.messages.push_back(std::move(m));
  }
  if (request.contains("tools") && !request["tools"].is_null()) {
    const Json& tools = request["tools"];
    if (!tools.is_array()) return field_error("tools", "expected an array");
    for (size_t i = 0; i < tools.size(); ++i) {
      const std::string tf = "tools[" + std::to_string(i) + "]";
      if (!tools[i].is_object() || !tools[i].contains("function") ||
          !tools[i]["function"].is_object())
        return field_error(tf + ".function", "expected an object");
      const Json& f = tools[i]["function"];
      if (!f.contains("name") || !f["name"].is_string())
        return field_error(tf + ".function.name", "expected a string");
      conv.tools.push_back({f});
    }
  }
  ChatOptions& o = conv.options;
  if (request.contains("thinking") && !request["thinking"].is_null()) {
    const Json& t = request["thinking"];
    if (t.is_boolean()) {
      o.thinking = t.get<bool>();
    } else if (t.is_object() && t.contains("type") && t["type"].is_string() &&
               (t["type"] == "enabled" || t["type"] == "disabled")) {
      o.thinking = t["type"] == "enabled";
    } else {
      return field_error("thinking", "expected {\"type\": \"enabled\"|\"disabled\"} or a bool");
    }
  }
  if (request.contains("reasoning_effort"))
    DSV4_RETURN_IF_ERROR(apply_effort(request["reasoning_effort"], "reasoning_effort", o));
  if (request.contains("chat_template_kwargs") && !request["chat_template_kwargs"].is_null()) {
    const Json& k = request["chat_template_kwargs"];
    if (!k.is_object()) return field_error("chat_template_kwargs", "expected an object");
    for (const char* key : {"thinking", "enable_thinking"}) {
      if (!k.contains(key) || k[key].is_null()) continue;
      DSV4_ASSIGN_OR_RETURN(o.thinking, read_bool(k, key, std::string("chat_template_kwargs.") + key));
    }
    if (k.contains("reasoning_effort"))
      DSV4_RETURN_IF_ERROR(
          apply_effort(k["reasoning_effort"], "chat_template_kwargs.reasoning_effort", o));
    if (k.contains("drop_thinking")) {
      DSV4_ASSIGN_OR_RETURN(o.drop_thinking,
                            read_bool(k, "drop_thinking", "chat_template_kwargs.drop_thinking"));
    }
  }
  if (request.contains("add_generation_prompt")) {
    DSV4_ASSIGN_OR_RETURN(o.add_generation_prompt,
                          read_bool(request, "add_generation_prompt", "add_generation_prompt"));
  }
  if (request.contains("continue_final_message")) {
    DSV4_ASSIGN_OR_RETURN(bool cont, read_bool(request, "continue_final_message",
                                               "continue_final_message"));
    if (cont) {
      if (conv.messages.back().role != Role::assistant)
        return field_error("continue_final_message", "the last message must be an assistant message");
      conv.messages.back().without_eos = true;
      o.add_generation_prompt = false;
    }
  }
  return conv;
}

StatusOr<Conversation> conversation_from_openai_text(std::string_view body, ChatFormat format) {
  Json request = Json::parse(body, nullptr, false);
  if (request.is_discarded()) return field_error("request", "body is not valid JSON");
  return conversation_from_openai(request, format);
}

}  // namespace dsv4::chat
