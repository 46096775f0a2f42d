// A deterministic stand-in for the engine and the text side, for tests of the HTTP layer only
// (`dsv4 serve --fake-engine`). It is not a model: it replies by a fixed script.
//
// Text side: byte-level tokens (ids 0..255 are bytes, 256 is BOS "<s>", 257 is EOS "</s>"); chat
// renders "<|role|>content\n" per message and ends "<|assistant|>", plus "<think>" when thinking
// is enabled; the output parser splits "…</think>" reasoning and "<tool>NAME ARGS</tool>" calls.
// Engine script, from the last message: "say:TEXT" replies TEXT; "call:NAME ARGS" replies a tool
// call; a tool result replies "the tool said RESULT"; anything else gets pseudo-random words
// keyed by (prompt, seed when temperature > 0). A thinking prompt first gets "hmm, let me
// think</think>". Directives in the prompt: "[[prefill-ms=N]]" delays the first token,
// "[[token-ms=N]]" each round. Rounds emit 1 token (draft false) or 1-3 (draft true), with the
// same tokens either way; logprobs are a fixed function of (position, token). Stop strings end a
// request as the lane core ends one: on the token that completes the earliest match, reported
// with the match's byte offset. A request's n candidates run as n scripts keyed by the seeds
// member_seed(seed, i), admitted together (n <= parallel) with one prompt-cache lookup, as the
// lane core admits them.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/engine.h"
#include "server/text_side.h"

namespace dsv4::server {

struct FakeEngineOptions {
  int32_t parallel = 8;        // requests in a round
  int32_t max_waiting = 256;   // queued beyond that: resource_exhausted
  int32_t token_ms = 2;        // per round
  int32_t prefill_ms = 0;      // before the first token
  int32_t context_length = 4096;
};

constexpr int32_t kFakeBos = 256;
constexpr int32_t kFakeEos = 257;
constexpr int32_t kFakeVocab = 258;

TextSide make_fake_text_side(int32_t context_length);

class FakeEngine final : public Engine {
 public:
  explicit FakeEngine(FakeEngineOptions options);
  ~FakeEngine() override;

  StatusOr<RequestId> submit(GenerationRequest request, EventSink sink) override;
  void cancel(RequestId id) override;
  EngineStats stats() const override;
  void halt() override;

 private:
  struct Job;
  void loop();
  void step(Job& job, GenerationEvent& event);

  FakeEngineOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> waiting_;
  std::list<std::shared_ptr<Job>> running_;
  std::deque<std::vector<int32_t>> recent_prompts_;  // for cached-token counts
  EngineStats stats_;
  RequestId next_id_ = 1;
  bool halted_ = false;
  bool quit_ = false;
  std::thread thread_;
};

}  // namespace dsv4::server
