// The lane host's admission check of a request: token ids in the vocabulary, sampling and length limits,
// constraints and prompt embeddings against what the backend takes (see lane_host.h).
#include "lanes/lane_host.h"

#include <algorithm>

#include "lanes/prompt_embeds.h"

namespace dsv4::lanes {
namespace {

constexpr int32_t kMaxTopLogprobs = 20;

Status check_tokens(const std::vector<TokenId>& tokens, int32_t vocab, const char* what) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      return error(StatusCode::invalid_argument, "{}[{}] = {} is outside the vocabulary [0, {})", what, i, tokens[i],
                   vocab);
    }
  }
  return ok_status();
}

}  // namespace

Status LaneHost::validate(const Request& r) const {
  const int64_t prompt = static_cast<int64_t>(r.prompt.size());
  if (prompt == 0) return error(StatusCode::invalid_argument, "the prompt is empty");
  if (prompt >= info_.max_context) {
    return error(StatusCode::invalid_argument, "a prompt of {} tokens leaves no room in the context of {}", prompt,
                 info_.max_context);
  }
  if (r.max_tokens < 1) return error(StatusCode::invalid_argument, "max_tokens {} is below 1", r.max_tokens);
  if (r.n < 1 || r.n > info_.max_streams) {
    return error(StatusCode::invalid_argument, "n {} is outside [1, {}] (the backend's streams)", r.n, info_.max_streams);
  }
  const SamplingParams& s = r.sampling;
  if (!(s.temperature >= 0.0f)) return error(StatusCode::invalid_argument, "temperature {} is negative", s.temperature);
  if (s.top_k < 0) return error(StatusCode::invalid_argument, "top_k {} is negative", s.top_k);
  if (!(s.top_p > 0.0f && s.top_p <= 1.0f)) return error(StatusCode::invalid_argument, "top_p {} is outside (0, 1]", s.top_p);
  if (!(s.min_p >= 0.0f && s.min_p < 1.0f)) return error(StatusCode::invalid_argument, "min_p {} is outside [0, 1)", s.min_p);
  if (r.top_logprobs < 0 || r.top_logprobs > kMaxTopLogprobs) {
    return error(StatusCode::invalid_argument, "top_logprobs {} is outside [0, {}]", r.top_logprobs, kMaxTopLogprobs);
  }
  if (static_cast<int64_t>(r.forced_tokens.size()) > r.max_tokens) {
    return error(StatusCode::invalid_argument, "{} forced tokens exceed max_tokens {}", r.forced_tokens.size(),
                 r.max_tokens);
  }
  DSV4_RETURN_IF_ERROR(check_tokens(r.prompt, info_.vocab_size, "prompt"));
  DSV4_RETURN_IF_ERROR(check_embeds(r, info_.embed_dim));
  DSV4_RETURN_IF_ERROR(check_tokens(r.forced_tokens, info_.vocab_size, "forced_tokens"));
  DSV4_RETURN_IF_ERROR(check_tokens(r.eos_ids, info_.vocab_size, "eos_ids"));
  DSV4_RETURN_IF_ERROR(check_tokens(r.thinking.close_tokens, info_.vocab_size, "thinking.close_tokens"));
  for (const auto& choice : r.choices) {
    if (choice.empty()) return error(StatusCode::invalid_argument, "a choice is empty");
    DSV4_RETURN_IF_ERROR(check_tokens(choice, info_.vocab_size, "choices"));
  }
  if (r.constraint != nullptr && (!r.choices.empty() || !r.forced_tokens.empty())) {
    return error(StatusCode::invalid_argument, "a token constraint does not combine with choices or forced tokens");
  }
  if (r.constraint_after >= info_.vocab_size) {
    return error(StatusCode::invalid_argument, "constraint_after {} is outside the vocabulary of {}", r.constraint_after,
                 info_.vocab_size);
  }
  if (!r.choices.empty() && r.thinking.max_tokens >= 0) {
    return error(StatusCode::invalid_argument, "choices do not combine with a thinking budget");
  }
  for (const auto& seq : r.stop_sequences) {
    if (seq.empty()) return error(StatusCode::invalid_argument, "a stop sequence is empty");
    DSV4_RETURN_IF_ERROR(check_tokens(seq, info_.vocab_size, "stop_sequences"));
  }
  if (!r.stop_strings.empty() && !options_.token_bytes) {
    return error(StatusCode::invalid_argument, "stop strings need the engine's token_bytes, which is not set");
  }
  if (r.thinking.max_tokens >= 0 && r.thinking.close_tokens.empty()) {
    return error(StatusCode::invalid_argument, "a thinking budget needs close tokens");
  }
  const int64_t max_rows = std::min<int64_t>(prompt + r.max_tokens, info_.max_context);
  const int64_t bytes = backend_.stream_bytes(max_rows) * r.n;
  if (bytes > info_.memory_budget_bytes) {
    return error(StatusCode::resource_exhausted,
                 "a request of {} positions needs {} bytes of stream memory; the backend has {} in all", max_rows, bytes,
                 info_.memory_budget_bytes);
  }
  return ok_status();
}

}  // namespace dsv4::lanes
