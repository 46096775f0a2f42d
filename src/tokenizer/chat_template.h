// Renders a typed conversation into the V4.1 (or V4 / V4-Flash-0731) prompt text, as encoding.py does.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/chat_types.h"

namespace dsv4::chat {

// An image of the prompt: its URL as given and where it came from (ContentPart::source).
struct ImageRef {
  std::string url;
  std::string source;
};

struct RenderedPrompt {
  std::string text;  // tokenize with special-token matching and without adding a BOS
  // The prompt ends with `<think>`: the reply starts with reasoning (feed the parser accordingly).
  bool reply_starts_in_reasoning = false;
  // One per `<｜deepseek_image｜>` in the text, in the order they appear there (pre-processing may move a message's
  // parts, e.g. tool results sorted by call order).
  std::vector<ImageRef> images;
};

// Rules (encoding/encoding.py of the release; tokenizer-and-chat.md §2.3-§2.5):
//  * tool messages become <tool_result> blocks of a user turn; consecutive user/tool messages merge
//    (blocks joined by "\n\n"); tool results are ordered by the preceding assistant's call order;
//  * conversation tools attach to the first system message (an empty one is inserted at index 0
//    when there is none); any tools disable drop_thinking;
//  * thinking + drop_thinking: assistant turns before the last user turn lose their reasoning;
//  * BOS first when add_bos; V4.1 opens with `<｜System｜>` when the first message is system or
//    thinking is on, followed in thinking mode by the "Reasoning Effort: N" line.
// Errors name the message: "messages[3]: tool_calls are only valid on assistant messages".
StatusOr<RenderedPrompt> render_conversation(const Conversation& conversation);

// The "## Tools" block for a list of tool `function` objects (exposed for tests and tooling).
std::string render_tools_block(ChatFormat format, const std::vector<Tool>& tools);

// Parses "low" / "high" / "max" (and the DeepSeek API aliases minimal, medium, xhigh) into the
// numeric budget; "none" means thinking off and returns 0.
StatusOr<int32_t> reasoning_effort_from_name(std::string_view name);

}  // namespace dsv4::chat
