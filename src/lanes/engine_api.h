// The engine API the server uses: submit a tokenized request, stream its tokens back, cancel, status, drain.
//
// Threads: submit/cancel/status/drain may be called from any thread. EventSink calls come from the one engine
// thread, in order per request, and must return quickly (copy and hand off; never call back into the Engine).
//
// Stop strings are matched by the engine on the output bytes (the concatenation of each generated token's bytes,
// from the byte-level tokenizer, given once to the engine as EngineOptions::token_bytes). The token that
// completes a match is still delivered; Finish says where the match starts so the server cuts the text there
// (when streaming, the server holds back text that could still become a stop string).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "lanes/constraint.h"
#include "lanes/sampling.h"

namespace dsv4::lanes {

using RequestId = uint64_t;  // assigned by submit, unique for the engine's life, never 0

enum class Priority { foreground, background };  // background waits while foreground requests queue

// A cap on reasoning: after `max_tokens` generated tokens without `end_token`, the engine forces `close_tokens`.
struct ThinkingBudget {
  int32_t max_tokens = -1;            // -1 = no cap; counts generated tokens while thinking
  TokenId end_token = -1;             // the token that ends thinking (e.g. `</think>`); thinking starts at once
  std::vector<TokenId> close_tokens;  // forced at the cap; should end with end_token
};

// Prompt positions fed as given embedding rows instead of their tokens' embeddings: one image's span (the vision
// encoder's rows for it; its tokens are the image token, one per position).
struct PromptEmbeds {
  int64_t start = 0;  // first prompt position
  int64_t count = 0;  // positions, >= 1
  std::shared_ptr<const std::vector<uint16_t>> values;  // bf16 [count, BackendInfo::embed_dim]
  bool image = true;  // image positions: the MoE's image bias routes them, Engram treats them as DEAD
  // The identity of the content (e.g. SHA-256 of the image's pixel patches and grid): the prompt cache keys these
  // positions by it and their offset (lanes/prompt_keys.h), so a repeated image resumes and a different one never does.
  std::array<uint8_t, 32> digest{};
};

struct Request {
  std::vector<TokenId> prompt;                         // rendered prompt ids; size >= 1
  // Sorted by start, disjoint, each ending before the prompt's last position (that position is fed as the first
  // verify window's row, which takes a token only). Needs BackendInfo::embed_dim > 0.
  std::vector<PromptEmbeds> embeds;
  SamplingParams sampling;                             // greedy by default
  std::optional<uint64_t> seed;                        // absent: seed_from_prompt(prompt)
  // Choices drawn from one prefill of the prompt (OpenAI's n), 1..max_streams: member i has RequestId
  // (submit's id) + i and seed member_seed(seed, i) (lanes/fanout.h); its events carry `choice` i. The prompt is
  // filled once, its state copied into the other members; admission reserves all n streams together. cancel of
  // submit's id cancels every member.
  int32_t n = 1;
  int32_t max_tokens = 256;                            // generated tokens at most (forced ones included); >= 1
  std::vector<TokenId> eos_ids;                        // added to the model's eos ids
  bool ignore_eos = false;                             // true: EOS does not finish (benchmarks)
  std::vector<std::vector<TokenId>> stop_sequences;    // finish when the output ends with one of these
  std::vector<std::string> stop_strings;               // finish when the output bytes contain one of these
  bool logprobs = false;                               // fill TokenEvent::logprob
  int32_t top_logprobs = 0;                            // alternatives per token, 0..20 (needs logprobs)
  // The first outputs, scored not sampled (teacher forcing). They never finish the request by EOS, stop sequence or
  // stop string (a scored text may hold them); stop rules match only in the output after them.
  std::vector<TokenId> forced_tokens;
  // Non-empty: the tokens drawn right after forced_tokens must spell one of these sequences (each non-empty);
  // every such draw is taken among the tokens that continue a sequence still possible (TokenChoices), then
  // generation runs free once the output after forced_tokens equals one of them (the shortest, when one
  // is a prefix of another). Not with a thinking budget.
  std::vector<std::vector<TokenId>> choices;
  // Set: from `constraint_after` on, every drawn token is one the constraint allows (structured outputs, strict tool
  // calls), and end-of-sequence tokens only where its output is whole. constraint_after < 0: from the first token;
  // otherwise from the token after the first output `constraint_after` (the end of a reasoning block), whether drawn
  // or forced by a thinking budget. Not with forced_tokens or choices.
  std::shared_ptr<const TokenConstraint> constraint;
  TokenId constraint_after = -1;
  bool draft = true;                                   // false: one token per round (the serial reference)
  ThinkingBudget thinking;                             // reasoning cap; off by default
  Priority priority = Priority::foreground;
};

// One committed output token.
struct TokenEvent {
  TokenId token = 0;
  float logprob = 0.0f;           // raw log-probability (temperature 1), when Request::logprobs
  std::vector<TokenLogprob> top;  // best alternatives, when Request::top_logprobs > 0
  bool forced = false;            // from forced_tokens or a thinking-budget close, not drawn
  bool last = false;              // the request's final token: on_finish follows at once
  int32_t choice = 0;             // the member (0..Request::n - 1) the token belongs to
};

enum class FinishReason { stop, length, cancelled, error };
enum class StopKind { none, eos, sequence, string };  // what ended a `stop` finish

struct Usage {
  int64_t prompt_tokens = 0;         // prompt length
  int64_t cached_prompt_tokens = 0;  // prompt rows restored from the prompt cache
  int64_t completion_tokens = 0;     // tokens delivered
  int64_t drafted_tokens = 0;        // DSpark drafts verified
  int64_t accepted_tokens = 0;       // drafts accepted
  int64_t verify_rounds = 0;         // verify windows this request ran
};

struct Finish {
  FinishReason reason = FinishReason::stop;
  std::string message;            // why, for error and cancelled ("halted: drain deadline passed")
  StopKind stop_kind = StopKind::none;
  int32_t stop_index = -1;        // index into stop_sequences or stop_strings
  int64_t stop_byte_offset = -1;  // StopKind::string: where the match starts in the output bytes
  int32_t choice = 0;             // the member (0..Request::n - 1) that finished
  Usage usage;
};

// Where a request's events go; one sink may serve many requests.
class EventSink {
 public:
  virtual ~EventSink() = default;
  // Tokens committed this round, in order (a drafted round may commit several).
  virtual void on_tokens(RequestId id, std::span<const TokenEvent> tokens) = 0;
  // The request's last event; called exactly once for every submitted request (each of its n members).
  virtual void on_finish(RequestId id, const Finish& finish) = 0;
  // Prompt progress after each piece (rows in the stream / prompt length); lets the server send keepalives.
  virtual void on_prefill(RequestId id, int64_t rows_done, int64_t rows_total) {}
};

struct EngineStatus {
  int32_t queued = 0;                 // submitted, not yet admitted
  int32_t running = 0;                // admitted and not finished (prefilling or decoding)
  bool draining = false;              // drain() called: new submissions are refused
  bool halted = false;                // drain deadline passed; the engine stopped
  int64_t rounds = 0;                 // engine rounds run
  int64_t generated_tokens = 0;       // tokens delivered, all requests
  int64_t drafted_tokens = 0;         // DSpark drafts verified, all requests
  int64_t accepted_tokens = 0;        // drafts accepted, all requests
  int64_t cache_lookups = 0;          // admissions that asked the prompt cache
  int64_t cache_hits = 0;             // admissions that resumed from it
  int64_t cache_hit_tokens = 0;       // prompt rows resumed
  int64_t cache_discarded = 0;        // entries found damaged or foreign and dropped
  int64_t cache_ram_bytes = 0;        // bytes of cached snapshots in RAM
  int64_t cache_disk_bytes = 0;       // bytes of cached snapshots on disk
  int64_t cache_entries = 0;          // entries in RAM and on disk
  int64_t prefill_chunk_rows = 0;     // the prompt rows the step budget gave the last step that filled a prompt
};

class Engine {
 public:
  virtual ~Engine() = default;
  // Queues a request. Refused at once (invalid_argument / resource_exhausted, naming why) when it can never
  // run: empty prompt, bad parameters, longer than the context, or larger than all memory; unavailable
  // while draining.
  virtual StatusOr<RequestId> submit(Request request, std::shared_ptr<EventSink> sink) = 0;
  // Ends the request between rounds (or between prompt pieces) with FinishReason::cancelled; unknown ids
  // and finished ones are ignored.
  virtual void cancel(RequestId id) = 0;
  // A consistent snapshot of counters, taken between rounds.
  virtual EngineStatus status() const = 0;
  // Refuses new submissions; lets queued and running requests continue for `grace`; then halts at a round
  // boundary, finishing what is left with FinishReason::error "halted: drain deadline passed". Returns when
  // the engine is idle: ok if everything finished, unavailable naming how many requests were halted.
  virtual Status drain(std::chrono::milliseconds grace) = 0;
};

}  // namespace dsv4::lanes
