// Finish rules applied per committed token, identically whether the token came from a draft, a forced window
// or a one-token round (so drafted output equals undrafted output, token for token).
#include "lanes/stream.h"

#include <algorithm>

namespace dsv4::lanes {
namespace {

bool ends_with(const std::vector<TokenId>& output, const std::vector<TokenId>& tail) {
  return !tail.empty() && output.size() >= tail.size() &&
         std::equal(tail.begin(), tail.end(), output.end() - static_cast<ptrdiff_t>(tail.size()));
}

}  // namespace

bool is_eos(const Request& request, const std::vector<TokenId>& model_eos, TokenId token) {
  return std::find(model_eos.begin(), model_eos.end(), token) != model_eos.end() ||
         std::find(request.eos_ids.begin(), request.eos_ids.end(), token) != request.eos_ids.end();
}

CommitOutcome commit_token(Stream& stream, TokenId token, const std::vector<TokenId>& model_eos,
                           const TokenBytesFn& token_bytes, Finish* finish, bool forced) {
  const Request& request = stream.request;
  stream.output.push_back(token);
  stream.usage.completion_tokens++;
  if (forced) {
    if (!request.stop_strings.empty()) stream.output_bytes += token_bytes(token);
    stream.free_tokens_from = stream.output.size();
    stream.free_bytes_from = stream.output_bytes.size();
  }
  auto stop = [&](StopKind kind, int32_t index, int64_t offset) {
    finish->reason = FinishReason::stop;
    finish->stop_kind = kind;
    finish->stop_index = index;
    finish->stop_byte_offset = offset;
    return CommitOutcome::finished;
  };

  if (!forced && !request.ignore_eos) {
    if (is_eos(request, model_eos, token)) return stop(StopKind::eos, -1, -1);
  }
  for (size_t i = 0; i < request.stop_sequences.size() && !forced; ++i) {
    const size_t free = stream.output.size() - stream.free_tokens_from;
    if (request.stop_sequences[i].size() <= free && ends_with(stream.output, request.stop_sequences[i]))
      return stop(StopKind::sequence, static_cast<int32_t>(i), -1);
  }
  if (!forced && !request.stop_strings.empty()) {
    const size_t before = stream.output_bytes.size();
    stream.output_bytes += token_bytes(token);
    // The earliest match that the new bytes complete (a match wholly inside older bytes would have stopped).
    int64_t best_offset = -1;
    int32_t best_index = -1;
    for (size_t i = 0; i < request.stop_strings.size(); ++i) {
      const std::string& s = request.stop_strings[i];
      if (s.empty()) continue;
      const size_t from = std::max(before >= s.size() - 1 ? before - (s.size() - 1) : 0, stream.free_bytes_from);
      const size_t at = stream.output_bytes.find(s, from);
      if (at != std::string::npos && (best_offset < 0 || static_cast<int64_t>(at) < best_offset)) {
        best_offset = static_cast<int64_t>(at);
        best_index = static_cast<int32_t>(i);
      }
    }
    if (best_index >= 0) return stop(StopKind::string, best_index, best_offset);
  }
  const int64_t positions = static_cast<int64_t>(request.prompt.size() + stream.output.size());
  if (static_cast<int64_t>(stream.output.size()) >= request.max_tokens || positions >= stream.max_rows) {
    finish->reason = FinishReason::length;
    return CommitOutcome::finished;
  }
  if (stream.thinking) {
    if (token == request.thinking.end_token) {
      stream.thinking = false;
    } else if (++stream.think_count >= request.thinking.max_tokens) {
      stream.thinking = false;
      // The close goes before anything else still forced.
      stream.forced.insert(stream.forced.begin(), request.thinking.close_tokens.begin(),
                           request.thinking.close_tokens.end());
      return CommitOutcome::cut;
    }
  }
  return CommitOutcome::more;
}

}  // namespace dsv4::lanes
