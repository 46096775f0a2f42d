// Typed chat conversation (messages, tools, options) that the V4.1 / V4 prompt encoder renders.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4::chat {

// Which prompt grammar to render: the V4.1 encoder (`<｜System｜>`, numeric effort, `<｜DSML｜ calls>`)
// or the V4 / V4-Flash-0731 one (no system token, "max" effort paragraph, `<｜DSML｜tool_calls>`).
enum class ChatFormat { v41, v4 };

// `developer` is rendered as the V4 encoder does (a user turn); the V4.1 release has no such role,
// so there it is rendered as `system` (OpenAI defines developer as system's successor).
// `latest_reminder` is DeepSeek's own reminder role (no OpenAI spelling).
enum class Role { system, developer, user, assistant, tool, latest_reminder };

// Internal quick-instruction tasks of the encoder; `none` for ordinary chat.
enum class Task { none, action, query, authority, domain, title, read_url };

// One part of a message's content: text, or an image (rendered as one `<｜deepseek_image｜>`).
struct ContentPart {
  enum class Kind { text, image };
  Kind kind = Kind::text;
  std::string text;       // kind == text
  std::string image_url;  // kind == image: the URL or data URL as given
  std::string source;     // kind == image: where the part came from ("messages[2].content[1]"), for errors
};

// A prior assistant tool call. `arguments` is the OpenAI JSON text of the arguments object.
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;
};

struct Message {
  Role role = Role::user;
  // Text parts are joined with "\n\n" (the encoder's rule for content blocks).
  std::vector<ContentPart> content;
  std::optional<std::string> reasoning_content;  // assistant turns
  std::vector<ToolCall> tool_calls;              // assistant turns
  std::string tool_call_id;                      // tool turns: which call this answers
  Task task = Task::none;
  // Assistant turn rendered without the closing EOS (continue a partial reply).
  bool without_eos = false;
  // A system message may carry a response-format schema, rendered after its content and tools.
  std::optional<nlohmann::ordered_json> response_format;
};

// One declared tool: the OpenAI `tools[i].function` object with its keys in request order
// (it is rendered with Python json.dumps rules, so key order is part of the prompt).
struct Tool {
  nlohmann::ordered_json function;
};

struct ChatOptions {
  ChatFormat format = ChatFormat::v41;
  bool thinking = true;
  // V4.1: the numeric budget 1..100 ("low" 50, "high" 75, "max" 100). V4: 100 renders the "max"
  // paragraph, anything else renders nothing.
  int32_t reasoning_effort = 75;
  // Drop reasoning_content of assistant turns before the last user turn (thinking mode, no tools).
  bool drop_thinking = true;
  bool add_bos = true;
  // Append the assistant header (`<｜Assistant｜>` + `<think>` / `</think>`) after a final user turn.
  bool add_generation_prompt = true;
};

struct Conversation {
  std::vector<Message> messages;
  // Attached to the first system message (one is inserted at index 0 when there is none).
  std::vector<Tool> tools;
  ChatOptions options;
};

const char* role_name(Role role);

// Marker strings of the prompt grammar (U+FF5C fullwidth bars, U+2581 lower blocks).
inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kDsml = "｜DSML｜";
inline constexpr std::string_view kSystemToken = "<｜System｜>";
inline constexpr std::string_view kUserToken = "<｜User｜>";
inline constexpr std::string_view kAssistantToken = "<｜Assistant｜>";
inline constexpr std::string_view kLatestReminderToken = "<｜latest_reminder｜>";
inline constexpr std::string_view kImagePlaceholder = "<｜deepseek_image｜>";

// DSML tag names after the `｜DSML｜` marker: V4.1 " calls" / " invoke" / " parameter" (leading
// space), V4 "tool_calls" / "invoke" / "parameter".
struct DsmlTags {
  std::string_view block;
  std::string_view invoke;
  std::string_view parameter;
};
DsmlTags dsml_tags(ChatFormat format);

}  // namespace dsv4::chat
