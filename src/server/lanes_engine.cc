// The lane-core adapter (see lanes_engine.h).
#include "server/lanes_engine.h"

#include <map>
#include <memory>
#include <utility>

namespace dsv4::server {
namespace {

// Forwards one request's lane-core events (all its n members) to its server sink, each tagged with
// its member's choice index. Called on the engine thread.
class ForwardingSink final : public lanes::EventSink {
 public:
  explicit ForwardingSink(server::EventSink sink) : sink_(std::move(sink)) {}

  void on_tokens(lanes::RequestId, std::span<const lanes::TokenEvent> tokens) override {
    if (tokens.empty()) return;
    GenerationEvent e;
    e.choice = tokens.front().choice;
    e.tokens.reserve(tokens.size());
    for (const auto& t : tokens) {
      TokenOut out;
      out.token = t.token;
      out.logprob = t.logprob;
      out.top.reserve(t.top.size());
      for (const auto& alt : t.top) out.top.push_back({alt.token, alt.logprob});
      e.tokens.push_back(std::move(out));
    }
    // A choice's final tokens travel with its finish (the server cuts at a stop string's match
    // only once it knows of it).
    if (tokens.back().last) {
      held_[e.choice] = std::move(e);
      return;
    }
    sink_(std::move(e));
  }

  void on_finish(lanes::RequestId, const lanes::Finish& f) override {
    GenerationEvent e;
    if (auto it = held_.find(f.choice); it != held_.end()) {
      e = std::move(it->second);
      held_.erase(it);
    }
    e.choice = f.choice;
    e.done = true;
    e.cached_prompt_tokens = static_cast<int32_t>(f.usage.cached_prompt_tokens);
    if (f.stop_kind == lanes::StopKind::string) e.stop_offset = f.stop_byte_offset;
    switch (f.reason) {
      case lanes::FinishReason::stop: e.finish = Finish::stop; break;
      case lanes::FinishReason::length: e.finish = Finish::length; break;
      case lanes::FinishReason::cancelled: e.finish = Finish::cancelled; break;
      case lanes::FinishReason::error:
        e.finish = Finish::error;
        // A halt (drain deadline) is the server going away, not a failure of the request.
        e.error = Status(f.message.rfind("halted", 0) == 0 ? StatusCode::unavailable
                                                           : StatusCode::internal,
                         f.message.empty() ? "generation failed" : f.message);
        break;
    }
    sink_(std::move(e));
  }

 private:
  server::EventSink sink_;
  std::map<int32_t, GenerationEvent> held_;  // by choice: its final tokens, until its on_finish
};

}  // namespace

LanesEngine::LanesEngine(lanes::Engine& engine, std::function<void()> halt)
    : engine_(engine), halt_(std::move(halt)) {}

lanes::Request LanesEngine::to_lanes(const GenerationRequest& r) {
  lanes::Request q;
  q.prompt = r.prompt;
  for (const PromptImage& i : r.images) q.embeds.push_back(lanes::PromptEmbeds{i.start, i.rows, i.embeds, true, i.digest});
  q.sampling.temperature = r.sampling.temperature;
  q.sampling.top_k = r.sampling.top_k > 0 ? r.sampling.top_k : 0;
  q.sampling.top_p = r.sampling.top_p;
  q.sampling.min_p = r.sampling.min_p;
  q.seed = r.sampling.seed;
  q.max_tokens = r.max_tokens;
  q.ignore_eos = r.ignore_eos;
  q.logprobs = r.logprobs;
  q.top_logprobs = r.logprobs ? r.top_logprobs : 0;
  q.forced_tokens = r.forced;
  q.choices = r.choices;
  q.constraint = r.constraint;
  q.constraint_after = r.constraint_after;
  q.draft = r.draft;
  q.stop_strings = r.stop;
  q.n = r.n;
  return q;
}

StatusOr<RequestId> LanesEngine::submit(GenerationRequest request, EventSink sink) {
  auto id = engine_.submit(to_lanes(request), std::make_shared<ForwardingSink>(std::move(sink)));
  if (!id.ok()) return id.status();
  return static_cast<RequestId>(*id);
}

void LanesEngine::cancel(RequestId id) { engine_.cancel(static_cast<lanes::RequestId>(id)); }

EngineStats LanesEngine::stats() const {
  lanes::EngineStatus s = engine_.status();
  EngineStats e;
  e.waiting = s.queued;
  e.running = s.running;
  e.prompt_cache_queries = s.cache_lookups;
  e.prompt_cache_hits = s.cache_hits;
  e.prompt_cache_bytes = s.cache_ram_bytes + s.cache_disk_bytes;
  e.draft_tokens = s.drafted_tokens;
  e.draft_accepted = s.accepted_tokens;
  e.rounds = s.rounds;
  e.prefill_chunk_rows = s.prefill_chunk_rows;
  return e;
}

void LanesEngine::halt() {
  if (halt_) halt_();
}

}  // namespace dsv4::server
