// Event-to-reply assembly for one request (see assembler.h).
#include "server/assembler.h"

#include <fmt/format.h>

#include <algorithm>

#include "server/stop_text.h"

namespace dsv4::server {

using json = nlohmann::json;

Assembler::Assembler(AssemblerSetup setup, const TextSide& text)
    : setup_(std::move(setup)), text_(text), text_stream_(text.new_text_stream()) {
  if (setup_.endpoint == Endpoint::chat)
    parser_ = text.new_output_parser(ChatParseOptions{setup_.thinking, setup_.tools});
  if (parser_ && setup_.forced_call) {
    // The call's opening is in the prompt; the parser reads it as if the model had written it, so
    // the call (its id and name) starts the reply.
    ChatDelta d;
    parser_->push(setup_.call_opening, d);
    take_delta(d);
  }
  if (setup_.echo) {
    // The echo starts with the prompt's first token, which no row scores.
    append(TokenOut{setup_.prompt_first, 0.0f, {}});
    echo_tokens_ = 1;
    echo_bytes_ = bytes_.size();
    release(bytes_.size(), false);
  }
}

// A token joins the output: its bytes, its text offset, its logprobs (alternatives cut to the
// request's count; a scored prompt may have asked the engine for more).
void Assembler::append(const TokenOut& token) {
  token_start_.push_back(bytes_.size());
  token_chars_.push_back(chars_);
  const std::string b = text_.output_bytes(token.token);
  for (unsigned char c : b) chars_ += (c & 0xC0) != 0x80;
  bytes_ += b;
  tokens_.push_back(token);
  if (tokens_.back().top.size() > static_cast<size_t>(setup_.top_logprobs))
    tokens_.back().top.resize(static_cast<size_t>(setup_.top_logprobs));
}

// Takes the token when it is one of the scored prompt's: kept for prompt_logprobs, echoed (never
// held back: stop strings apply to generated text only). Returns false for a generated token.
bool Assembler::take_prompt_token(const TokenOut& token) {
  if (prompt_seen_ >= setup_.scored_prompt) return false;
  ++prompt_seen_;
  engine_prompt_bytes_ += text_.output_bytes(token.token).size();
  if (setup_.prompt_logprobs >= 0) {
    prompt_scored_.push_back(token);
    if (prompt_scored_.back().top.size() > static_cast<size_t>(setup_.prompt_logprobs))
      prompt_scored_.back().top.resize(static_cast<size_t>(setup_.prompt_logprobs));
  }
  if (setup_.echo) {
    append(token);
    ++echo_tokens_;
    echo_bytes_ = bytes_.size();
    release(bytes_.size(), false);
  }
  return true;
}

std::vector<int64_t> Assembler::offsets(size_t first, size_t count) const {
  return std::vector<int64_t>(token_chars_.begin() + static_cast<ptrdiff_t>(first),
                              token_chars_.begin() + static_cast<ptrdiff_t>(first + count));
}

std::string Assembler::feed(const GenerationEvent& event) {
  if (finished_) return {};
  if (event.cached_prompt_tokens >= 0) cached_ = event.cached_prompt_tokens;
  // Token by token, so reasoning and logprobs align with the text each token released.
  const bool use_stops = !setup_.forced && !setup_.stop.empty();
  for (size_t i = 0; i < event.tokens.size() && !finished_; ++i) {
    if (take_prompt_token(event.tokens[i])) continue;
    append(event.tokens[i]);
    // The last token of a stop-string finish completed the match; every earlier one left no whole
    // stop string in bytes_, so holding back possible starts suffices (stop_text.h).
    if (event.done && event.stop_offset >= 0 && i + 1 == event.tokens.size()) break;
    const size_t hold =
        use_stops ? stop_hold_length(std::string_view(bytes_).substr(released_), setup_.stop) : 0;
    release(bytes_.size() - hold, false);
  }
  if (event.done && !finished_) {
    size_t end = bytes_.size();
    // A stop string matched: the reply ends where the match starts. Nothing at or after that
    // offset was released, so the clamp only guards a misbehaving engine.
    // The engine's offset counts the scored prompt tokens' bytes (they are its forced output); the
    // reply's bytes start with the echo, or with the generated tokens.
    if (event.stop_offset >= 0) {
      const int64_t at = event.stop_offset - static_cast<int64_t>(engine_prompt_bytes_) +
                         static_cast<int64_t>(echo_bytes_);
      end = std::clamp(static_cast<size_t>(std::max<int64_t>(at, 0)), released_, bytes_.size());
    }
    release(end, true);
    finish_ = event.finish;
    error_ = event.error;
    finished_ = true;
    if (parser_) parser_->finish(batch_);
  }
  if (setup_.stream) return flush_batch(finished_);
  // Not streamed: fold the batch into the reply.
  std::vector<TokenOut> lp = take_logprobs(finished_);
  all_logprobs_.insert(all_logprobs_.end(), lp.begin(), lp.end());
  text_out_ += batch_text_;
  message_.reasoning += batch_.reasoning;
  message_.content += batch_.content;
  for (const auto& d : batch_.tool_calls) {
    ToolCall& c = calls_[d.index];
    if (!d.id.empty()) c.id = d.id;
    if (!d.name.empty()) c.name = d.name;
    c.arguments += d.arguments;
  }
  batch_text_.clear();
  batch_ = ChatDelta{};
  return {};
}

// Passes bytes_[released_, end) on: decoded to text, then to the output parser (chat) or the
// reply text (completions).
void Assembler::release(size_t end, bool final) {
  std::string text = text_stream_->push(std::string_view(bytes_).substr(released_, end - released_));
  released_ = end;
  if (final) text += text_stream_->flush();
  if (finished_) return;
  if (!parser_) {
    batch_text_ += text;
    return;
  }
  ChatDelta d;
  if (!text.empty()) parser_->push(text, d);
  // Reasoning tokens: with thinking on, every token released before the first content or tool
  // call (the closing tag included). Tokens whose bytes decode to no text yet (a special token
  // such as an ignored EOS, or the first bytes of a UTF-8 character) count too: the count follows
  // the tokens released, not the text.
  if (setup_.thinking && !content_started_) {
    if (d.content.empty() && d.tool_calls.empty()) {
      size_t upto = tokens_counted_;  // tokens whose bytes have all been released
      while (upto < tokens_.size() &&
             (upto + 1 < tokens_.size() ? token_start_[upto + 1] : bytes_.size()) <= released_)
        ++upto;
      reasoning_tokens_ += static_cast<int32_t>(upto - tokens_counted_);
      tokens_counted_ = upto;
    } else {
      content_started_ = true;
    }
  }
  if (!text.empty()) take_delta(d);
}

void Assembler::take_delta(ChatDelta& d) {
  if (setup_.forced_call && tool_calls_seen_ && (!d.content.empty() || !d.reasoning.empty())) {
    // The forced call's block has ended (closed, or cut short by text that is not a call): the
    // reply is the call; what follows is not sent.
    d.content.clear();
    d.reasoning.clear();
    ended_early_ = true;
    finished_ = true;
    finish_ = Finish::stop;
  }
  if (!d.tool_calls.empty()) tool_calls_seen_ = true;
  batch_.reasoning += d.reasoning;
  batch_.content += d.content;
  for (auto& c : d.tool_calls) {
    if (!c.name.empty() && c.id.empty())
      c.id = fmt::format("call_{}_{}", setup_.meta.id.substr(setup_.meta.id.find('-') + 1), c.index);
    // Consecutive argument fragments of one call merge into one delta.
    if (!batch_.tool_calls.empty() && batch_.tool_calls.back().index == c.index && c.id.empty() &&
        c.name.empty())
      batch_.tool_calls.back().arguments += c.arguments;
    else
      batch_.tool_calls.push_back(c);
  }
}

std::vector<TokenOut> Assembler::take_logprobs(bool all) {
  if (!setup_.logprobs) return {};
  size_t upto = logprobs_sent_;
  if (all && released_ == bytes_.size()) {
    upto = tokens_.size();
  } else if (all) {
    // Cut by a stop string: the tokens that began before its match.
    while (upto < tokens_.size() && token_start_[upto] < released_) ++upto;
  } else {
    // Tokens whose whole text has been released.
    while (upto < tokens_.size()) {
      size_t end = upto + 1 < tokens_.size() ? token_start_[upto + 1] : bytes_.size();
      if (end > released_) break;
      ++upto;
    }
  }
  std::vector<TokenOut> out(tokens_.begin() + logprobs_sent_, tokens_.begin() + upto);
  logprobs_sent_ = upto;
  return out;
}

std::string Assembler::flush_batch(bool closing) {
  std::string out;
  std::vector<TokenOut> lp = take_logprobs(closing);
  const ResponseMeta& m = setup_.meta;
  if (parser_) {
    std::vector<json> deltas;
    if (!batch_.reasoning.empty()) deltas.push_back({{"reasoning_content", batch_.reasoning}});
    if (!batch_.content.empty()) deltas.push_back({{"content", batch_.content}});
    if (!batch_.tool_calls.empty()) deltas.push_back(tool_calls_delta(batch_.tool_calls));
    if (!role_sent_ && (!deltas.empty() || !lp.empty())) {
      out += sse_event(indexed(chat_chunk(m, {{"role", "assistant"}, {"content", ""}}, "", nullptr,
                                          setup_.include_usage)));
      role_sent_ = true;
    }
    json lpj = lp.empty() ? json(nullptr) : chat_logprobs(lp, text_.token_bytes);
    if (deltas.empty() && !lp.empty()) deltas.push_back(json::object());
    for (size_t i = 0; i < deltas.size(); ++i)
      out += sse_event(
          indexed(chat_chunk(m, deltas[i], "", i == 0 ? lpj : json(nullptr), setup_.include_usage)));
  } else if (!batch_text_.empty() || !lp.empty()) {
    json lpj = nullptr;
    const size_t first = logprobs_sent_ - lp.size();
    if (!lp.empty())
      lpj = completion_logprobs(lp, text_.token_bytes, setup_.top_logprobs, offsets(first, lp.size()),
                                setup_.echo && first == 0);
    out += sse_event(indexed(completion_chunk(m, batch_text_, "", lpj, setup_.include_usage)));
  }
  batch_text_.clear();
  batch_ = ChatDelta{};
  return out;
}

std::string Assembler::close_choice_sse() {
  std::string out;
  if (finish_ == Finish::error) return out;
  const ResponseMeta& m = setup_.meta;
  if (parser_) {
    if (!role_sent_)
      out += sse_event(indexed(chat_chunk(m, {{"role", "assistant"}, {"content", ""}}, "", nullptr,
                                          setup_.include_usage)));
    role_sent_ = true;
    out += sse_event(
        indexed(chat_chunk(m, json::object(), finish_reason(), nullptr, setup_.include_usage)));
  } else {
    out += sse_event(
        indexed(completion_chunk(m, "", finish_reason(), nullptr, setup_.include_usage)));
  }
  return out;
}

std::string Assembler::finish_sse() {
  if (finish_ == Finish::error) {
    ApiError e = error_from_status(error_.ok() ? Status(StatusCode::internal, "generation failed")
                                               : error_);
    return sse_event(e.to_json()) + sse_done();
  }
  std::string out = close_choice_sse();
  if (setup_.include_usage) out += sse_event(usage_chunk(setup_.meta, parser_ != nullptr, usage()));
  return out + sse_done();
}

json Assembler::indexed(json chunk) const {
  if (setup_.index != 0) chunk["choices"][0]["index"] = setup_.index;
  return chunk;
}

double Assembler::generated_logprob() const {
  double sum = 0;
  for (size_t i = static_cast<size_t>(echo_tokens_); i < tokens_.size(); ++i) sum += tokens_[i].logprob;
  return sum;
}

json Assembler::reply() const {
  if (!parser_) {
    json lp = setup_.logprobs
                  ? completion_logprobs(all_logprobs_, text_.token_bytes, setup_.top_logprobs,
                                        offsets(0, all_logprobs_.size()), setup_.echo)
                  : json(nullptr);
    json r = text_completion(setup_.meta, text_out_, finish_reason(), lp, usage());
    // vLLM's place for them on completions: in the choice.
    if (setup_.prompt_logprobs >= 0)
      r["choices"][0]["prompt_logprobs"] =
          prompt_logprobs_json(prompt_scored_, text_.token_bytes, setup_.prompt_logprobs);
    return r;
  }
  ChatMessageOut msg = message_;
  for (const auto& [index, call] : calls_) msg.tool_calls.push_back(call);
  json lp = setup_.logprobs ? chat_logprobs(all_logprobs_, text_.token_bytes) : json(nullptr);
  json r = chat_completion(setup_.meta, msg, finish_reason(), lp, usage());
  // vLLM's place for them on chat: beside the choices.
  if (setup_.prompt_logprobs >= 0)
    r["prompt_logprobs"] = prompt_logprobs_json(prompt_scored_, text_.token_bytes, setup_.prompt_logprobs);
  return r;
}

Usage Assembler::usage() const {
  Usage u;
  u.prompt_tokens = setup_.prompt_tokens;
  u.completion_tokens = completion_tokens();
  u.cached_tokens = cached_;
  u.reasoning_tokens = parser_ ? reasoning_tokens_ : -1;
  return u;
}

std::string Assembler::finish_reason() const {
  if (finish_ == Finish::stop && tool_calls_seen_) return "tool_calls";
  return finish_reason_name(finish_);
}

}  // namespace dsv4::server
