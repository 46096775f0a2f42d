// One admitted request inside the lane core: its rows, pending token, forced queue, held drafts and finish rules.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/prompt_cache.h"
#include "lanes/backend.h"
#include "lanes/choices.h"
#include "lanes/constraint.h"
#include "lanes/depth.h"
#include "lanes/engine_api.h"

namespace dsv4::lanes {

// Maps a token to its output bytes (byte-level tokenizer); used to match stop strings.
using TokenBytesFn = std::function<std::string(TokenId)>;

struct Stream {
  RequestId id = 0;
  StreamId sid = 0;                      // backend stream id; set at admission
  Request request;
  std::vector<cache::Key> keys;          // the prompt's prompt-cache keys (prompt_keys), when a cache is set
  std::shared_ptr<EventSink> sink;
  uint64_t seed = 0;                     // request.seed or seed_from_prompt
  int64_t max_rows = 0;                  // positions the stream may reach: min(prompt + max_tokens, context)
  int64_t reserved_bytes = 0;            // backend memory held from admission to finish
  int64_t seq = 0;                       // admission order (tie-break for fairness)
  // Request::n > 1: members share one prefill. The first (choice 0) fills the prompt; the others wait for its state.
  int32_t choice = 0;                    // member index; RequestId = group + choice
  RequestId group = 0;                   // the request's id (choice 0's)
  bool awaiting_prompt = false;          // a member waiting for choice 0's prompt state (no pieces of its own)

  bool decoding = false;                 // prompt rows [0, L-1) are in; windows may run
  int64_t rows = 0;                      // rows the backend holds (kept rows only, between rounds)
  TokenId pending = 0;                   // last committed token, fed as row 0 of the next window at `rows`
  std::deque<TokenId> forced;            // tokens the engine must emit next (request's, then budget closes)
  bool choosing = false;                 // request.choices constrain the next draws (until one is spelled)
  std::vector<TokenId> spelled;          // tokens drawn under the choice constraint so far
  std::unique_ptr<ConstraintCursor> cursor;  // request.constraint's position; set once the constraint applies
  std::vector<TokenId> output;           // committed tokens
  std::string output_bytes;              // their bytes, when stop strings are set
  size_t free_tokens_from = 0;           // output index after the last forced token: stop sequences match after it
  size_t free_bytes_from = 0;            // output_bytes offset after the last forced token: stop strings start there
  DraftProposal held;                    // drafts for the next window (empty: none)
  bool depth_decided = false;            // drafts asked (or depth 0 chosen) since the last verify
  std::optional<DepthRule> depth;        // drafting requests only
  int64_t last_served = -1;              // round of the last verify (least recently served goes first)
  bool thinking = false;                 // inside reasoning (thinking budget set and end token not seen)
  int32_t think_count = 0;               // tokens generated while thinking
  Usage usage;
};

enum class CommitOutcome {
  more,      // keep taking this round's tokens
  cut,       // a thinking-budget close was queued: take no more tokens this round
  finished,  // the request is done; `finish` is filled
};

// Whether `token` ends the request's output: one of the model's or the request's end-of-sequence ids.
bool is_eos(const Request& request, const std::vector<TokenId>& model_eos, TokenId token);

// Appends one token to the stream's output and applies the finish rules in order: EOS, stop sequence,
// stop string, max_tokens, context; then the thinking budget.
//
// A forced token (forced_tokens, a scored prompt, a thinking-budget close) is given, not generated: EOS, stop
// sequences and stop strings never finish on it, and a stop sequence or string matches only within the output
// after the last forced token (a scored text may hold an EOS id or a stop string). max_tokens and the context
// still apply.
CommitOutcome commit_token(Stream& stream, TokenId token, const std::vector<TokenId>& model_eos,
                           const TokenBytesFn& token_bytes, Finish* finish, bool forced = false);

}  // namespace dsv4::lanes
