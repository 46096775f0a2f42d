// The generation service the HTTP server drives: token ids in, streamed tokens with logprobs out.
//
// The server sees only this interface (and TextSide, text_side.h). src/cli adapts the lane core's
// Engine API to it; fake_engine.h implements it deterministically for tests of the HTTP layer.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "lanes/constraint.h"

namespace dsv4::server {

struct Sampling {
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;        // (0, 1]
  int32_t top_k = 0;         // <= 0: off
  float min_p = 0.0f;        // [0, 1]
  uint64_t seed = 0;         // keyed sampler seed; the server draws one when the request has none
};

// An image's span in the prompt: `rows` positions from `start`, each carrying the image token, fed as the given
// embedding rows (the vision encoder's) instead of the token's embedding.
struct PromptImage {
  int64_t start = 0;
  int64_t rows = 0;
  std::shared_ptr<const std::vector<uint16_t>> embeds;  // bf16 [rows, D]
  std::array<uint8_t, 32> digest{};  // SHA-256 of the image's pixel patches and grid: its prompt-cache identity
};

struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids, each in [0, vocab)
  std::vector<PromptImage> images;  // sorted by start, disjoint, before the prompt's last token
  // Non-empty: score this continuation teacher-forced (no sampling); the engine returns exactly
  // these tokens with their logprobs and ends with finish_reason length.
  std::vector<int32_t> forced;
  // Non-empty: the first generated tokens must spell one of these sequences (each non-empty); the
  // engine draws each of them among the tokens that continue one, then generates freely (a forced
  // tool call's name and the markup that closes it, with several tools offered).
  std::vector<std::vector<int32_t>> choices;
  // Set: every generated token from `constraint_after` on (the token after it; -1: from the first) is one the
  // constraint allows, and the output ends only where it is whole (structured outputs, strict tool calls).
  std::shared_ptr<const lanes::TokenConstraint> constraint;
  int32_t constraint_after = -1;
  Sampling sampling;
  int32_t max_tokens = 16;    // >= 1
  int32_t top_logprobs = 0;   // 0..20 alternatives per token (when logprobs)
  bool logprobs = false;      // report the chosen token's logprob
  bool draft = true;          // false: one token a round (the reference drafted output equals)
  bool ignore_eos = false;    // keep going past end-of-sequence tokens
  // Finish (stop) when the output bytes (TextSide::output_bytes of each token) contain one of
  // these; the token that completes the match is still delivered, with the finish.
  std::vector<std::string> stop;
  // Candidates drawn from one prefill of the prompt (OpenAI's n, or best_of), >= 1. Candidate i
  // samples with seed member_seed(sampling.seed, i) (lanes/fanout.h), so it equals a solo request
  // with that seed; its events carry choice = i and it ends with its own done event.
  int32_t n = 1;
};

struct TopLogprob {
  int32_t token = 0;
  float logprob = 0;
};

struct TokenOut {
  int32_t token = 0;
  float logprob = 0;              // valid when the request asked for logprobs
  std::vector<TopLogprob> top;    // best first, top_logprobs entries
};

enum class Finish { none, stop, length, cancelled, error };

// One delivery from the engine for one candidate. Its tokens arrive in order; its last event has
// done = true and finish != none. An event may carry tokens and done at once.
struct GenerationEvent {
  int32_t choice = 0;                // the candidate (0..GenerationRequest::n - 1)
  std::vector<TokenOut> tokens;
  bool done = false;
  Finish finish = Finish::none;
  Status error;                      // set when finish == error (halted, engine failure)
  int32_t cached_prompt_tokens = -1; // >= 0 once known (the first event reports it)
  // finish == stop by a stop string: where the match starts in the output bytes (the reply ends
  // there); -1 otherwise. Set only on the done event, which then also carries the token that
  // completed the match, so no earlier event's bytes contain a whole stop string.
  int64_t stop_offset = -1;
};

// Called from engine threads, in order, never concurrently for one request. Must not block long.
using EventSink = std::function<void(GenerationEvent&&)>;

// Engine-wide counters for /metrics and /health; all monotonic except the gauges marked so.
struct EngineStats {
  int64_t waiting = 0;                // gauge: admitted, not yet running
  int64_t running = 0;                // gauge: streams in the current rounds
  int64_t prompt_cache_queries = 0;   // admissions that looked their prompt up in the cache
  int64_t prompt_cache_hits = 0;      // of which resumed from a cached prefix
  int64_t prompt_cache_bytes = 0;     // gauge: bytes held by the prompt cache
  int64_t draft_tokens = 0;           // drafted tokens proposed to verify
  int64_t draft_accepted = 0;         // of which were accepted
  int64_t rounds = 0;
  int64_t prefill_chunk_rows = 0;     // gauge: prompt rows the step budget gave the last step that filled a prompt
};

using RequestId = uint64_t;

class Engine {
 public:
  virtual ~Engine() = default;
  // Queues a request; events go to `sink` until each of its n candidates sent one with done.
  // Errors: resource_exhausted when the queue is full, unavailable when halted, invalid_argument
  // for a request it cannot serve (n beyond what it runs at once, among others).
  virtual StatusOr<RequestId> submit(GenerationRequest request, EventSink sink) = 0;
  // Ends a request at the next round boundary with Finish::cancelled; unknown ids are ignored.
  // Candidate i of a request is also known as (submit's id) + i: cancel(id) ends every candidate,
  // cancel(id + i) with i > 0 ends candidate i alone.
  virtual void cancel(RequestId id) = 0;
  virtual EngineStats stats() const = 0;
  // Stops at a round boundary: every unfinished request ends with Finish::error (unavailable).
  virtual void halt() = 0;
};

}  // namespace dsv4::server
