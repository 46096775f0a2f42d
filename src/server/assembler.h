// Turns one request's engine events into its OpenAI reply: decode the output bytes, hold back what
// a stop string may still cut and cut where the engine's match starts, split reasoning / content /
// tool calls, align logprobs with released text, count usage.
//
// Streamed: feed() returns SSE text per event; finish_sse() closes the stream. Not streamed: the
// same feed() accumulates and reply() builds the whole object. No I/O and no clocks here.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/engine.h"
#include "server/responses.h"
#include "server/schema.h"
#include "server/text_side.h"

namespace dsv4::server {

struct AssemblerSetup {
  Endpoint endpoint = Endpoint::chat;
  ResponseMeta meta;
  int32_t index = 0;  // the choice's "index" in streamed chunks (n > 1: reply_choices.h)
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  int32_t top_logprobs = 0;
  std::vector<std::string> stop;  // the engine matches them; the server holds back and cuts
  bool forced = false;       // teacher-forced scoring: stop strings do not apply
  bool thinking = false;     // the chat prompt opened a reasoning block
  bool tools = false;        // tool calls are parsed out of the output
  // A forced tool call (tool_choice required or named): the prompt ends with `call_opening` (the
  // model's markup opening a call), which the output parser reads first; the reply ends with the
  // call block — text after it is dropped and the engine request cancelled.
  bool forced_call = false;
  std::string call_opening;
  int32_t prompt_tokens = 0;
  // Prompt scoring (echo, prompt_logprobs): the engine's first `scored_prompt` tokens are the
  // prompt's tokens after `prompt_first`, forced, with their logprobs. echo: the reply's text and
  // logprobs start with the whole prompt (the first token's logprob null); prompt_logprobs >= 0:
  // vLLM's prompt_logprobs list with that many alternatives.
  int32_t scored_prompt = 0;
  int32_t prompt_first = 0;
  bool echo = false;
  int32_t prompt_logprobs = -1;
};

class Assembler {
 public:
  Assembler(AssemblerSetup setup, const TextSide& text);

  // Consumes an event. Returns the SSE text to send now (streamed; "" otherwise).
  std::string feed(const GenerationEvent& event);
  // True once the reply is complete: the engine finished, or a forced tool call's block ended
  // (ended_early(): the caller cancels the engine request).
  bool finished() const { return finished_; }
  bool ended_early() const { return ended_early_; }
  bool failed() const { return finish_ == Finish::error; }
  const Status& error() const { return error_; }

  // The closing SSE text: last chunk with finish_reason, the usage chunk, [DONE]; or, when the
  // engine failed, an error event and [DONE].
  std::string finish_sse();
  // The choice's own closing chunk (with its finish_reason; the role chunk first if none was sent);
  // "" when the engine failed. finish_sse() starts with it.
  std::string close_choice_sse();
  // The whole non-streamed reply.
  nlohmann::json reply() const;

  Usage usage() const;
  std::string finish_reason() const;  // stop, length, tool_calls, cancelled, error
  // Generated tokens (an echoed prompt's are not counted).
  int32_t completion_tokens() const { return static_cast<int32_t>(tokens_.size()) - echo_tokens_; }
  // The sum of the generated tokens' logprobs (best_of ranks candidates by it); the engine must
  // have been asked for logprobs.
  double generated_logprob() const;

 private:
  void append(const TokenOut& token);
  bool take_prompt_token(const TokenOut& token);
  std::vector<int64_t> offsets(size_t first, size_t count) const;
  void release(size_t end, bool final);
  void take_delta(ChatDelta& d);
  std::vector<TokenOut> take_logprobs(bool all);
  std::string flush_batch(bool closing);
  nlohmann::json indexed(nlohmann::json chunk) const;

  AssemblerSetup setup_;
  const TextSide& text_;
  std::unique_ptr<TextStream> text_stream_;
  std::unique_ptr<OutputParser> parser_;

  std::vector<TokenOut> tokens_;
  std::string bytes_;                // the output bytes (TextSide::output_bytes of each token)
  std::vector<size_t> token_start_;  // offset of each token's bytes in bytes_
  std::vector<int64_t> token_chars_; // characters of bytes_ before each token (text_offset)
  int64_t chars_ = 0;                // characters in bytes_ (UTF-8 lead bytes)
  // Prompt scoring: the engine's first scored_prompt tokens are prompt tokens.
  int32_t prompt_seen_ = 0;          // of them, taken so far
  size_t engine_prompt_bytes_ = 0;   // their output bytes (the engine's stop offsets count them)
  int32_t echo_tokens_ = 0;          // leading tokens_ that echo the prompt
  size_t echo_bytes_ = 0;            // bytes_ they take
  std::vector<TokenOut> prompt_scored_;  // for prompt_logprobs
  size_t released_ = 0;              // bytes of bytes_ passed on (to the text stream)
  size_t logprobs_sent_ = 0;
  int32_t cached_ = 0;
  int32_t reasoning_tokens_ = 0;
  size_t tokens_counted_ = 0;  // tokens already counted as reasoning
  bool content_started_ = false;

  bool finished_ = false;
  bool ended_early_ = false;
  Finish finish_ = Finish::none;
  Status error_;

  // Accumulated reply (non-streamed) and the current batch (streamed).
  std::string text_out_;
  ChatMessageOut message_;
  std::map<int32_t, ToolCall> calls_;
  std::string batch_text_;
  ChatDelta batch_;
  bool role_sent_ = false;
  bool tool_calls_seen_ = false;
  std::vector<TokenOut> all_logprobs_;
};

}  // namespace dsv4::server
