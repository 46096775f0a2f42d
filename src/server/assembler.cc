// Event-to-reply assembly for one request (see assembler.h).
#include "server/assembler.h"

#include <fmt/format.h>

#include <set>

namespace dsv4::server {

using json = nlohmann::json;

Assembler::Assembler(AssemblerSetup setup, const TextSide& text)
    : setup_(std::move(setup)), text_(text), detok_(text.new_detokenizer()), stop_(setup_.stop) {
  if (setup_.endpoint == Endpoint::chat)
    parser_ = text.new_output_parser(ChatParseOptions{setup_.thinking, setup_.tools});
}

std::string Assembler::feed(const GenerationEvent& event) {
  if (finished_) return {};
  if (event.cached_prompt_tokens >= 0) cached_ = event.cached_prompt_tokens;
  for (const TokenOut& t : event.tokens) {
    if (finished_) break;  // tokens after a stop-string match are dropped
    std::string piece = detok_->push(t.token);
    token_start_.push_back(raw_len_);
    tokens_.push_back(t);
    raw_len_ += piece.size();
    accept_text(piece, false);
  }
  if (event.done && !finished_) {
    finish_ = event.finish;
    error_ = event.error;
    accept_text(detok_->flush(), true);
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

void Assembler::accept_text(const std::string& piece, bool final) {
  bool use_stops = !setup_.forced && !setup_.stop.empty();
  std::string released = use_stops ? stop_.push(piece) : piece;
  if (use_stops && final && !stop_.matched()) released += stop_.flush();
  if (use_stops && stop_.matched() && !finished_) {
    finished_ = true;
    stopped_by_text_ = true;
    finish_ = Finish::stop;
  }
  emit_released(released);
  if (stopped_by_text_ && !final && parser_) parser_->finish(batch_);
}

void Assembler::emit_released(const std::string& released) {
  if (released.empty()) return;
  if (!parser_) {
    batch_text_ += released;
    return;
  }
  ChatDelta d;
  parser_->push(released, d);
  // Reasoning tokens: with thinking on, every token released before the first content or tool
  // call (the closing tag included).
  if (setup_.thinking && !content_started_) {
    if (d.content.empty() && d.tool_calls.empty()) {
      size_t released_len = setup_.forced || setup_.stop.empty() ? raw_len_ : stop_.released();
      size_t upto = tokens_counted_;
      while (upto < tokens_.size() && token_start_[upto] < released_len) ++upto;
      reasoning_tokens_ += static_cast<int32_t>(upto - tokens_counted_);
      tokens_counted_ = upto;
    } else {
      content_started_ = true;
    }
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
  size_t released_len = setup_.forced || setup_.stop.empty() ? raw_len_ : stop_.released();
  size_t upto = logprobs_sent_;
  if (all && !stopped_by_text_) {
    upto = tokens_.size();
  } else if (stopped_by_text_) {
    // Tokens that began before the stop string's position.
    while (upto < tokens_.size() && token_start_[upto] < released_len) ++upto;
  } else {
    // Tokens whose whole text has been released.
    while (upto < tokens_.size()) {
      size_t end = upto + 1 < tokens_.size() ? token_start_[upto + 1] : raw_len_;
      if (end > released_len) break;
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
      out += sse_event(chat_chunk(m, {{"role", "assistant"}, {"content", ""}}, "", nullptr,
                                  setup_.include_usage));
      role_sent_ = true;
    }
    json lpj = lp.empty() ? json(nullptr) : chat_logprobs(lp, text_.token_bytes);
    if (deltas.empty() && !lp.empty()) deltas.push_back(json::object());
    for (size_t i = 0; i < deltas.size(); ++i)
      out += sse_event(chat_chunk(m, deltas[i], "", i == 0 ? lpj : json(nullptr), setup_.include_usage));
  } else if (!batch_text_.empty() || !lp.empty()) {
    json lpj = nullptr;
    if (!lp.empty())
      lpj = completion_logprobs(lp, text_.token_bytes, setup_.top_logprobs,
                                static_cast<int64_t>(token_start_[logprobs_sent_ - lp.size()]));
    out += sse_event(completion_chunk(m, batch_text_, "", lpj, setup_.include_usage));
  }
  batch_text_.clear();
  batch_ = ChatDelta{};
  return out;
}

std::string Assembler::finish_sse() {
  std::string out;
  const ResponseMeta& m = setup_.meta;
  if (finish_ == Finish::error) {
    ApiError e = error_from_status(error_.ok() ? Status(StatusCode::internal, "generation failed")
                                               : error_);
    out += sse_event(e.to_json());
    return out + sse_done();
  }
  if (parser_) {
    if (!role_sent_)
      out += sse_event(chat_chunk(m, {{"role", "assistant"}, {"content", ""}}, "", nullptr,
                                  setup_.include_usage));
    role_sent_ = true;
    out += sse_event(chat_chunk(m, json::object(), finish_reason(), nullptr, setup_.include_usage));
  } else {
    out += sse_event(completion_chunk(m, "", finish_reason(), nullptr, setup_.include_usage));
  }
  if (setup_.include_usage) out += sse_event(usage_chunk(m, parser_ != nullptr, usage()));
  return out + sse_done();
}

json Assembler::reply() const {
  if (!parser_) {
    json lp = setup_.logprobs ? completion_logprobs(all_logprobs_, text_.token_bytes,
                                                    setup_.top_logprobs, 0)
                              : json(nullptr);
    return text_completion(setup_.meta, text_out_, finish_reason(), lp, usage());
  }
  ChatMessageOut msg = message_;
  for (const auto& [index, call] : calls_) msg.tool_calls.push_back(call);
  json lp = setup_.logprobs ? chat_logprobs(all_logprobs_, text_.token_bytes) : json(nullptr);
  return chat_completion(setup_.meta, msg, finish_reason(), lp, usage());
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
