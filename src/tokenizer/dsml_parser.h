// Incremental parser of generated assistant text: reasoning, content and DSML tool calls as OpenAI deltas.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_types.h"

namespace dsv4::chat {

struct ParserOptions {
  ChatFormat format = ChatFormat::v41;
  // True when the prompt ended with `<think>` (RenderedPrompt::reply_starts_in_reasoning).
  bool starts_in_reasoning = false;
  // True when the prompt itself ends with the block opener "\n\n<｜DSML｜ calls>\n" (a server that
  // forces a tool call prefills it): parsing starts where an invoke or the block end is expected.
  bool starts_in_tool_block = false;
  // Tool-call ids by call index; the default gives "call_<index>". A server passes a generator
  // that is unique per request.
  std::function<std::string(int32_t index)> make_tool_call_id;
};

// One streamed piece of a tool call. The first piece of a call carries id and name; later pieces
// carry argument text only. Concatenating a call's `arguments` gives a JSON object text.
struct ToolCallDelta {
  int32_t index = 0;
  std::string id;
  std::string name;
  std::string arguments;
};

struct ChatDelta {
  std::string reasoning_content;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return reasoning_content.empty() && content.empty() && tool_calls.empty(); }
};

// Appends `from` to `into` (tool-call pieces of the same index are merged).
void append_delta(ChatDelta& into, const ChatDelta& from);

struct ParsedToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON object text
};

struct ParsedMessage {
  std::string reasoning_content;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
  bool ended_with_eos = false;  // an `<｜end▁of▁sentence｜>` was seen; text after it is ignored
};

// Grammar (encoding.py parse_message_from_completion_text; T = "｜DSML｜", tags per format):
//   [reasoning "</think>"] content ["\n\n<T calls>\n" invoke* "</T calls>"] [EOS]
//   invoke    = "<T invoke name=\"N\">\n" (param "\n")* "</T invoke>\n"   (no-param form: ">\n\n</T invoke>")
//   param     = "<T parameter name=\"K\" string=\"true|false\">V</T parameter>"
// Arguments are `{"K": json(V)}` for string="true" and `{"K": V}` otherwise (V kept verbatim when it
// is valid JSON, else written as a JSON string, so arguments are always a JSON object).
// Streaming: pieces in, deltas out; a suffix that could start a marker is held back, so no partial
// markup reaches content or reasoning. Deltas depend only on the text, not on how it was cut:
// the concatenated deltas of any split equal the one-shot parse. Cuts fall on piece boundaries or
// before ASCII marker bytes, so complete-UTF-8 pieces give complete-UTF-8 deltas.
// Malformed DSML: markup not yet turned into a tool call becomes content; a call whose header was
// complete is closed (its arguments stay valid JSON) and the rest is parsed as content again.
class DsmlStreamParser {
 public:
  explicit DsmlStreamParser(ParserOptions options);

  ChatDelta feed(std::string_view piece);
  // End of stream: flushes what was held back and closes an unfinished tool call.
  ChatDelta finish();
  // Everything parsed so far.
  const ParsedMessage& message() const { return message_; }

 private:
  enum class State {
    reasoning, content, block_open, block_next, invoke_header, param_next, param_header,
    param_value, param_close, invoke_close, done
  };
  enum class Match { yes, no, more };

  std::string_view rest() const { return std::string_view(buf_).substr(pos_); }
  void consume(size_t n, bool to_pending);
  Match starts_with(std::string_view lit) const;
  bool step();
  bool step_text();
  bool step_invoke_header();
  bool step_param_header();
  bool step_param_value();
  // Resolves an incomplete match: waits while more text may come, else treats it as malformed.
  bool wait_or_malformed();
  bool malformed();
  void emit_reasoning(std::string_view s);
  void emit_content(std::string_view s);
  void emit_arguments(std::string_view s);
  void open_call(std::string name);
  void close_call();

  ParserOptions options_;
  std::string tool_start_;     // "\n\n<T calls"
  std::string block_end_;      // "</T calls>"
  std::string invoke_open_;    // "<T invoke"
  std::string invoke_end_;     // "</T invoke"
  std::string param_open_;     // "<T parameter"
  std::string param_end_;      // "</T parameter"

  State state_;
  bool final_ = false;
  std::string buf_;
  size_t pos_ = 0;
  std::string pending_;  // consumed markup not yet reflected in any delta
  ChatDelta out_;
  ParsedMessage message_;
  // Tool-call bookkeeping.
  bool call_open_ = false;
  bool first_after_header_ = false;
  bool param_is_string_ = false;
  bool string_value_open_ = false;
  int32_t params_in_call_ = 0;
  std::string param_prefix_;  // `{"K": ` or `, "K": ` of a non-string parameter
  size_t value_scanned_ = 0;  // bytes of a held non-string value already searched for its end
  std::set<std::string> keys_;
  int32_t next_index_ = 0;
};

// One-shot parse: feed(text) then finish().
ParsedMessage parse_completion(std::string_view text, const ParserOptions& options);

}  // namespace dsv4::chat
