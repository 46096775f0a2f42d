// The text-side callbacks the server is given: tokenize, render chat, detokenize, parse output.
//
// The server never links a tokenizer or chat template; src/cli builds a TextSide from the model's
// tokenizer and chat encoding (or the test-only fake, fake_engine.h).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "structured/tool_calls.h"

namespace dsv4::server {

// Thinking options resolved from the request (thinking / chat_template_kwargs / reasoning_effort).
struct ThinkingOptions {
  std::optional<bool> enabled;   // absent: the model's default
  std::string effort;            // "" (default) or none/minimal/low/medium/high/xhigh/max
};

// An image of a rendered chat: its URL as sent and the content part it came from ("messages[1].content[0]").
struct ChatImage {
  std::string url;
  std::string param;
};

struct RenderedChat {
  std::vector<int32_t> tokens;
  bool thinking = false;         // the prompt opened a reasoning block the output continues
  // One per image token (ImageSide::image_token_id) in `tokens`, in the same order; the server expands each into
  // the image's span.
  std::vector<ChatImage> images;
};

// One streamed tool-call fragment in OpenAI's shape: the first fragment of a call carries id and
// name, later ones only argument text.
struct ToolCallDelta {
  int32_t index = 0;
  std::string id;         // set on the first fragment
  std::string name;       // set on the first fragment
  std::string arguments;  // JSON text appended to the call's arguments
};

struct ChatDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

// Output bytes to text: text is returned only once its UTF-8 is complete (invalid bytes become
// U+FFFD).
class TextStream {
 public:
  virtual ~TextStream() = default;
  virtual std::string push(std::string_view bytes) = 0;
  virtual std::string flush() = 0;  // whatever is held back at the end (lossy-decoded)
};

// Splits the model's raw output text into reasoning, content and tool calls, incrementally.
class OutputParser {
 public:
  virtual ~OutputParser() = default;
  virtual void push(std::string_view text, ChatDelta& out) = 0;
  virtual void finish(ChatDelta& out) = 0;
};

struct ChatParseOptions {
  bool thinking = false;
  bool tools = false;  // tools were offered (and tool_choice is not none)
};

struct TextSide {
  int32_t vocab_size = 0;
  int32_t context_length = 0;  // the model's maximum prompt + completion tokens
  // Raw text to token ids; add_special: the tokenizer's BOS (a completions prompt), not for a
  // forced continuation.
  std::function<StatusOr<std::vector<int32_t>>(const std::string& text, bool add_special)> tokenize;
  // A validated chat request body, as sent (key order matters: tool schemas are rendered in it), to
  // prompt tokens; `thinking` is what the server read of the thinking options.
  std::function<StatusOr<RenderedChat>(std::string_view body, const ThinkingOptions& thinking)>
      render_chat;
  // The bytes a token adds to the reply ("" for special tokens, which replies do not show). The
  // engine matches stop strings on their concatenation (its Finish says where a match starts); the
  // server cuts and decodes the same bytes, so both count offsets alike.
  std::function<std::string(int32_t token)> output_bytes;
  std::function<std::unique_ptr<TextStream>()> new_text_stream;
  std::function<std::unique_ptr<OutputParser>(const ChatParseOptions&)> new_output_parser;
  // A forced tool call (tool_choice required or named): the reply is prefilled with
  // `close_reasoning` (when the prompt opened a reasoning block) and `tool_call_opening(name)`, the
  // model's markup that opens a call to `name` (name "": up to where the model writes the name).
  std::string close_reasoning;
  std::function<std::string(const std::string& name)> tool_call_opening;
  // The raw bytes one token stands for, special tokens spelled out (logprobs entries: token text
  // and bytes).
  std::function<std::string(int32_t token)> token_bytes;
  // Whether constrained output (structured outputs, strict tool calls) may write a token: ordinary tokens and the
  // tool-call markup, not chat-protocol markup (`<｜User｜>`, `</think>` ...). Unset: every token with output bytes.
  std::function<bool(int32_t token)> constrainable;
  // The tool-call markup of the chat format (strict tool calls); empty: strict tool calls are refused.
  structured::ToolMarkup tool_markup;
};

}  // namespace dsv4::server
