// A request's choices (see reply_choices.h).
#include "server/reply_choices.h"

#include <algorithm>
#include <numeric>

namespace dsv4::server {

using json = nlohmann::json;

ReplyChoices::ReplyChoices(const AssemblerSetup& setup, const TextSide& text, int32_t n,
                           int32_t candidates)
    : setup_(setup), n_(n) {
  for (int32_t i = 0; i < candidates; ++i) {
    AssemblerSetup s = setup;
    s.index = i;
    choices_.push_back(std::make_unique<Assembler>(std::move(s), text));
  }
}

std::string ReplyChoices::feed(const GenerationEvent& event) {
  if (event.choice < 0 || event.choice >= candidates()) return {};
  Assembler& a = at(event.choice);
  if (a.finished()) return {};
  std::string out = a.feed(event);
  if (setup_.stream && a.finished()) out += a.close_choice_sse();
  return out;
}

bool ReplyChoices::finished() const {
  return std::all_of(choices_.begin(), choices_.end(), [](const auto& a) { return a->finished(); });
}

bool ReplyChoices::failed() const {
  return std::any_of(choices_.begin(), choices_.end(), [](const auto& a) { return a->failed(); });
}

Status ReplyChoices::error() const {
  for (const auto& a : choices_)
    if (a->failed()) return a->error().ok() ? Status(StatusCode::internal, "generation failed") : a->error();
  return ok_status();
}

std::string ReplyChoices::finish_sse() const {
  if (failed()) return sse_event(error_from_status(error()).to_json()) + sse_done();
  std::string out;
  if (setup_.include_usage)
    out += sse_event(usage_chunk(setup_.meta, setup_.endpoint == Endpoint::chat, usage()));
  return out + sse_done();
}

Usage ReplyChoices::usage() const {
  Usage u = choices_.front()->usage();  // the prompt and its cached tokens, once
  for (size_t i = 1; i < choices_.size(); ++i) {
    const Usage c = choices_[i]->usage();
    u.completion_tokens += c.completion_tokens;
    if (u.reasoning_tokens >= 0) u.reasoning_tokens += c.reasoning_tokens;
  }
  return u;
}

std::string ReplyChoices::finish_reason() const { return choices_.front()->finish_reason(); }

std::vector<int32_t> ReplyChoices::returned() const {
  std::vector<int32_t> order(choices_.size());
  std::iota(order.begin(), order.end(), 0);
  if (candidates() > n_) {
    std::vector<double> score;
    for (const auto& a : choices_) score.push_back(a->generated_logprob());
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return score[a] > score[b]; });
  }
  order.resize(static_cast<size_t>(n_));
  return order;
}

json ReplyChoices::reply() const {
  json r;
  json list = json::array();
  int32_t k = 0;
  for (int32_t i : returned()) {
    json one = choices_[static_cast<size_t>(i)]->reply();
    json choice = std::move(one["choices"][0]);
    choice["index"] = k++;
    list.push_back(std::move(choice));
    if (r.is_null()) r = std::move(one);  // id, created, model; chat's prompt_logprobs
  }
  r["choices"] = std::move(list);
  r["usage"] = usage_json(usage());
  return r;
}

}  // namespace dsv4::server
