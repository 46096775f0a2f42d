// V4.1 / V4 chat prompt rendering: pre-processing (tool merge, ordering, thinking drop) and per-turn text.
#include "tokenizer/chat_template.h"

#include <algorithm>
#include <map>

#include "tokenizer/chat_pyjson.h"

namespace dsv4::chat {

const char* role_name(Role role) {
  switch (role) {
    case Role::system: return "system";
    case Role::developer: return "developer";
    case Role::user: return "user";
    case Role::assistant: return "assistant";
    case Role::tool: return "tool";
    case Role::latest_reminder: return "latest_reminder";
  }
  return "?";
}

DsmlTags dsml_tags(ChatFormat format) {
  if (format == ChatFormat::v4) return {"tool_calls", "invoke", "parameter"};
  return {" calls", " invoke", " parameter"};
}

namespace {

// The V4 "max" effort paragraph (V4 encoder REASONING_EFFORT_MAX).
constexpr std::string_view kV4MaxEffort =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left "
    "unchecked.\n\n";

const char* task_token(Task task) {
  switch (task) {
    case Task::action: return "<｜action｜>";
    case Task::query: return "<｜query｜>";
    case Task::authority: return "<｜authority｜>";
    case Task::domain: return "<｜domain｜>";
    case Task::title: return "<｜title｜>";
    case Task::read_url: return "<｜read_url｜>";
    case Task::none: break;
  }
  return "";
}

// A user-turn block after tool merging: plain text or one tool result.
struct Block {
  bool tool_result = false;
  std::string tool_call_id;
  std::string text;
  std::vector<ImageRef> images;  // the text's image placeholders, in order
};

// A message after pre-processing (no tool role left).
struct Turn {
  Role role = Role::user;
  std::string content;        // non-user roles
  std::vector<ImageRef> images;  // content's image placeholders, in order (user turns: in their blocks)
  std::vector<Block> blocks;  // user turns
  std::optional<std::string> reasoning;
  std::vector<ToolCall> tool_calls;
  Task task = Task::none;
  bool without_eos = false;
  bool has_tools = false;
  std::optional<nlohmann::ordered_json> response_format;
};

struct Renderer {
  const Conversation& conv;
  ChatFormat format;
  DsmlTags tags;
  std::vector<Turn> turns;

  bool v41() const { return format == ChatFormat::v41; }

  // Counts as a user turn for the generation header and the thinking drop.
  bool is_user_like(size_t i) const {
    const Role r = turns[i].role;
    if (r == Role::user) return true;
    if (v41()) return r == Role::system && i > 0;
    return r == Role::developer;
  }

  int64_t last_user_index() const {
    for (size_t i = turns.size(); i-- > 0;)
      if (is_user_like(i)) return static_cast<int64_t>(i);
    return -1;
  }

  StatusOr<std::string> joined_content(size_t index, const Message& m, std::vector<ImageRef>& images) {
    std::string out;
    for (size_t p = 0; p < m.content.size(); ++p) {
      const ContentPart& part = m.content[p];
      if (p > 0) out += "\n\n";
      if (part.kind == ContentPart::Kind::image) {
        if (!v41())
          return error(StatusCode::invalid_argument,
                       "messages[{}].content[{}]: images need the V4.1 chat format", index, p);
        out += kImagePlaceholder;
        images.push_back({part.image_url, part.source});
      } else {
        if (v41() && part.text.find(kImagePlaceholder) != std::string::npos)
          return error(StatusCode::invalid_argument,
                       "messages[{}].content[{}]: text contains the image token {}; send images "
                       "as image parts",
                       index, p, kImagePlaceholder);
        out += part.text;
      }
    }
    return out;
  }

  // Conversion, tool attachment, tool-message merge (merge_tool_messages).
  Status build_turns() {
    const auto& msgs = conv.messages;
    std::vector<Turn> plain;
    for (size_t i = 0; i < msgs.size(); ++i) {
      const Message& m = msgs[i];
      if (!m.tool_calls.empty() && m.role != Role::assistant)
        return error(StatusCode::invalid_argument,
                     "messages[{}]: tool_calls are only valid on assistant messages", i);
      if (m.reasoning_content && v41() &&
          m.reasoning_content->find(kImagePlaceholder) != std::string::npos)
        return error(StatusCode::invalid_argument,
                     "messages[{}].reasoning_content: contains the image token {}", i,
                     kImagePlaceholder);
      Turn t;
      t.role = (m.role == Role::developer && v41()) ? Role::system : m.role;
      DSV4_ASSIGN_OR_RETURN(t.content, joined_content(i, m, t.images));
      if (t.role == Role::developer && t.content.empty())
        return error(StatusCode::invalid_argument,
                     "messages[{}]: a developer message needs content", i);
      t.reasoning = m.reasoning_content;
      t.tool_calls = m.tool_calls;
      t.task = m.task;
      t.without_eos = m.without_eos;
      t.response_format = m.response_format;
      if (m.role == Role::tool) t.blocks.push_back({true, m.tool_call_id, "", {}});
      plain.push_back(std::move(t));
    }
    if (!conv.tools.empty()) {
      auto it = std::find_if(plain.begin(), plain.end(),
                             [](const Turn& t) { return t.role == Role::system; });
      if (it == plain.end()) {
        Turn system;
        system.role = Role::system;
        it = plain.insert(plain.begin(), std::move(system));
      }
      it->has_tools = true;
    }
    for (Turn& t : plain) {
      const bool prev_user = !turns.empty() && turns.back().role == Role::user;
      if (t.role == Role::tool) {
        Block b = std::move(t.blocks.front());
        b.text = std::move(t.content);
        b.images = std::move(t.images);
        if (prev_user) {
          turns.back().blocks.push_back(std::move(b));
        } else {
          Turn u;
          u.role = Role::user;
          u.blocks.push_back(std::move(b));
          turns.push_back(std::move(u));
        }
      } else if (t.role == Role::user) {
        Block b{false, "", std::move(t.content), std::move(t.images)};
        t.images.clear();
        if (prev_user && turns.back().task == Task::none) {
          turns.back().blocks.push_back(std::move(b));
        } else {
          t.blocks.push_back(std::move(b));
          turns.push_back(std::move(t));
        }
      } else {
        turns.push_back(std::move(t));
      }
    }
    return ok_status();
  }

  // sort_tool_results_by_call_order: stable sort of a user turn's tool results by call index.
  void sort_tool_results() {
    std::map<std::string, size_t> order;
    for (Turn& t : turns) {
      if (t.role == Role::assistant && !t.tool_calls.empty()) {
        order.clear();
        for (size_t i = 0; i < t.tool_calls.size(); ++i)
          if (!t.tool_calls[i].id.empty()) order.emplace(t.tool_calls[i].id, i);
      } else if (t.role == Role::user) {
        std::vector<Block> results;
        for (const Block& b : t.blocks)
          if (b.tool_result) results.push_back(b);
        if (results.size() < 2 || order.empty()) continue;
        auto key = [&](const Block& b) {
          auto it = order.find(b.tool_call_id);
          return it == order.end() ? size_t{0} : it->second;
        };
        std::stable_sort(results.begin(), results.end(),
                         [&](const Block& a, const Block& b) { return key(a) < key(b); });
        size_t next = 0;
        for (Block& b : t.blocks)
          if (b.tool_result) b = results[next++];
      }
    }
  }

  // _drop_thinking_messages: earlier assistants lose reasoning, earlier non-kept roles vanish.
  void drop_thinking() {
    const int64_t last_user = last_user_index();
    std::vector<Turn> kept;
    for (size_t i = 0; i < turns.size(); ++i) {
      Turn& t = turns[i];
      const bool keep_role = t.role == Role::user || t.role == Role::system ||
                             t.role == Role::latest_reminder;
      if (keep_role || static_cast<int64_t>(i) >= last_user) {
        kept.push_back(std::move(t));
      } else if (t.role == Role::assistant) {
        t.reasoning.reset();
        kept.push_back(std::move(t));
      }
    }
    turns = std::move(kept);
  }

  std::string render_arguments(const ToolCall& call) const {
    // Tolerates double-encoded JSON; anything but an object becomes {"arguments": <raw text>}.
    nlohmann::ordered_json args = call.arguments;
    for (int round = 0; round < 2 && args.is_string(); ++round) {
      auto parsed = nlohmann::ordered_json::parse(args.get_ref<const std::string&>(), nullptr, false);
      if (parsed.is_discarded()) break;
      args = std::move(parsed);
    }
    if (!args.is_object()) args = nlohmann::ordered_json::object({{"arguments", call.arguments}});
    std::string out;
    bool first = true;
    for (const auto& [key, value] : args.items()) {
      if (!first) out += "\n";
      first = false;
      out += "<";
      out += kDsml;
      out += tags.parameter;
      out += " name=\"" + key + "\" string=\"";
      if (value.is_string()) {
        out += "true\">" + value.get<std::string>();
      } else {
        out += "false\">" + python_json_dumps(value);
      }
      out += "</";
      out += kDsml;
      out += tags.parameter;
      out += ">";
    }
    return out;
  }

  std::string render_tool_calls(const std::vector<ToolCall>& calls) const {
    const std::string dsml(kDsml);
    std::string out = "\n\n<" + dsml + std::string(tags.block) + ">\n";
    for (size_t i = 0; i < calls.size(); ++i) {
      if (i > 0) out += "\n";
      out += "<" + dsml + std::string(tags.invoke) + " name=\"" + calls[i].name + "\">\n";
      out += render_arguments(calls[i]);
      out += "\n</" + dsml + std::string(tags.invoke) + ">";
    }
    out += "\n</" + dsml + std::string(tags.block) + ">";
    return out;
  }

  void render_system_extras(std::string& out, const Turn& t) const {
    if (t.has_tools) out += "\n\n" + render_tools_block(format, conv.tools);
    if (t.response_format)
      out += "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to "
             "reply:\n" + python_json_dumps(*t.response_format);
  }

  std::string render_turn(size_t index, bool effective_drop) const {
    const ChatOptions& o = conv.options;
    const Turn& t = turns[index];
    const int64_t last_user = last_user_index();
    const int64_t idx = static_cast<int64_t>(index);
    std::string out;
    if (v41()) {
      std::string effort;
      if (index == 0 && o.thinking)
        effort = "Reasoning Effort: " + std::to_string(o.reasoning_effort) +
                 " (range 1-100, the higher the value, the more thorough the reasoning)\n\n";
      if (index == 0 && (!effort.empty() || t.role == Role::system)) out += kSystemToken;
      out += effort;
    } else if (index == 0 && o.thinking && o.reasoning_effort == 100) {
      out += kV4MaxEffort;
    }
    switch (t.role) {
      case Role::system:
        if (v41() && index > 0) out += kSystemToken;
        out += t.content;
        render_system_extras(out, t);
        break;
      case Role::developer:
        out += kUserToken;
        out += t.content;
        render_system_extras(out, t);
        break;
      case Role::user:
        out += kUserToken;
        for (size_t b = 0; b < t.blocks.size(); ++b) {
          if (b > 0) out += "\n\n";
          if (t.blocks[b].tool_result) out += "<tool_result>" + t.blocks[b].text + "</tool_result>";
          else out += t.blocks[b].text;
        }
        break;
      case Role::latest_reminder:
        out += kLatestReminderToken;
        out += t.content;
        break;
      case Role::assistant: {
        const bool prev_task = index > 0 && turns[index - 1].task != Task::none;
        if (o.thinking && !prev_task && (!effective_drop || idx > last_user)) {
          out += t.reasoning.value_or("");
          out += kThinkEnd;
        }
        out += t.content;
        if (!t.tool_calls.empty()) out += render_tool_calls(t.tool_calls);
        if (!t.without_eos) out += kEos;
        break;
      }
      case Role::tool: break;  // merged away in build_turns
    }
    // The transition: only before an assistant / reminder turn or after the last turn.
    const bool last = index + 1 == turns.size();
    if (!last) {
      const Role next = turns[index + 1].role;
      if (next != Role::assistant && next != Role::latest_reminder) return out;
    } else if (!o.add_generation_prompt) {
      return out;
    }
    if (t.task != Task::none) {
      if (t.task != Task::action) {
        out += task_token(t.task);
      } else {
        out += kAssistantToken;
        out += o.thinking ? kThinkStart : kThinkEnd;
        out += task_token(t.task);
      }
    } else if (is_user_like(index)) {
      out += kAssistantToken;
      const bool think = o.thinking && (!effective_drop || idx >= last_user);
      out += think ? kThinkStart : kThinkEnd;
    }
    return out;
  }
};

}  // namespace

std::string render_tools_block(ChatFormat format, const std::vector<Tool>& tools) {
  const DsmlTags tags = dsml_tags(format);
  const std::string d(kDsml);
  const std::string block = d + std::string(tags.block);
  const std::string invoke = d + std::string(tags.invoke);
  const std::string param = d + std::string(tags.parameter);
  std::string out =
      "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can "
      "invoke tools by writing a \"<" + block + ">\" block like the following:\n\n"
      "<" + block + ">\n"
      "<" + invoke + " name=\"$TOOL_NAME\">\n"
      "<" + param + " name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" + param +
      ">\n...\n</" + invoke + ">\n"
      "<" + invoke + " name=\"$TOOL_NAME2\">\n...\n</" + invoke + ">\n"
      "</" + block + ">\n\n"
      "String parameters should be specified as is and set `string=\"true\"`. For all other types "
      "(numbers, booleans, arrays, objects), pass the value in JSON format and set "
      "`string=\"false\"`.\n\n"
      "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning "
      "inside <think>...</think> BEFORE any tool calls or final response.\n\n"
      "Otherwise, output directly after </think> with tool calls or final response.\n\n"
      "### Available Tool Schemas\n\n";
  for (size_t i = 0; i < tools.size(); ++i) {
    if (i > 0) out += "\n";
    append_python_json(out, tools[i].function);
  }
  out += "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "
         "tool calls.\n";
  return out;
}

StatusOr<int32_t> reasoning_effort_from_name(std::string_view name) {
  if (name == "none") return 0;
  if (name == "low" || name == "minimal") return 50;
  if (name == "high" || name == "medium" || name == "xhigh") return 75;
  if (name == "max") return 100;
  return error(StatusCode::invalid_argument,
               "reasoning_effort: '{}' is not one of none, minimal, low, medium, high, xhigh, max "
               "or an integer 1..100",
               name);
}

StatusOr<RenderedPrompt> render_conversation(const Conversation& conversation) {
  const ChatOptions& o = conversation.options;
  if (o.reasoning_effort < 1 || o.reasoning_effort > 100)
    return error(StatusCode::invalid_argument, "reasoning_effort: {} is outside 1..100",
                 o.reasoning_effort);
  Renderer r{conversation, o.format, dsml_tags(o.format), {}};
  DSV4_RETURN_IF_ERROR(r.build_turns());
  r.sort_tool_results();
  bool any_tools = false;
  for (const Turn& t : r.turns) any_tools = any_tools || t.has_tools;
  const bool effective_drop = o.drop_thinking && !any_tools;
  if (o.thinking && effective_drop) r.drop_thinking();
  RenderedPrompt out;
  if (o.add_bos) out.text += kBos;
  for (size_t i = 0; i < r.turns.size(); ++i) out.text += r.render_turn(i, effective_drop);
  out.reply_starts_in_reasoning =
      out.text.size() >= kThinkStart.size() &&
      std::string_view(out.text).substr(out.text.size() - kThinkStart.size()) == kThinkStart;
  // The images in text order: turn by turn, a user turn's blocks in their (sorted) order.
  for (const Turn& t : r.turns) {
    out.images.insert(out.images.end(), t.images.begin(), t.images.end());
    for (const Block& b : t.blocks) out.images.insert(out.images.end(), b.images.begin(), b.images.end());
  }
  return out;
}

}  // namespace dsv4::chat
