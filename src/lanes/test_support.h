// Test support for the lane core: an event collector and a serial reference decoder over the fake backend's math.
//
// The reference is a plain loop (one token at a time, no windows, drafts, pieces or scheduling): it chains the
// fake's hash over the prompt (given embedding rows mixed in) and each token, draws with sample_keyed, and applies EOS / stop sequences /
// forced tokens / max_tokens / thinking budget in their simplest form. The lane core must match it exactly.
#pragma once

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "lanes/engine_api.h"
#include "lanes/fake_backend.h"

namespace dsv4::lanes::testing {

struct Outcome {
  std::vector<TokenId> tokens;
  std::vector<float> logprobs;
  std::vector<bool> forced;
  std::vector<std::vector<TokenLogprob>> top;
  Finish finish;
  bool finished = false;
  int32_t token_calls = 0;               // on_tokens calls
  std::vector<int64_t> prefill_rows;     // on_prefill progress
  int finish_count = 0;                  // on_finish calls (must be exactly 1)
};

class Collector final : public EventSink {
 public:
  void on_tokens(RequestId id, std::span<const TokenEvent> tokens) override {
    std::lock_guard lock(mutex_);
    Outcome& o = outcomes_[id];
    o.token_calls++;
    for (const TokenEvent& t : tokens) {
      o.tokens.push_back(t.token);
      o.logprobs.push_back(t.logprob);
      o.forced.push_back(t.forced);
      o.top.push_back(t.top);
    }
  }
  void on_finish(RequestId id, const Finish& finish) override {
    std::lock_guard lock(mutex_);
    Outcome& o = outcomes_[id];
    finish_order_.push_back(id);
    o.finish = finish;
    o.finished = true;
    o.finish_count++;
  }
  void on_prefill(RequestId id, int64_t rows, int64_t total) override {
    std::lock_guard lock(mutex_);
    outcomes_[id].prefill_rows.push_back(rows);
  }
  Outcome get(RequestId id) {
    std::lock_guard lock(mutex_);
    return outcomes_[id];
  }
  std::vector<RequestId> finish_order() {
    std::lock_guard lock(mutex_);
    return finish_order_;
  }

 private:
  std::mutex mutex_;
  std::map<RequestId, Outcome> outcomes_;
  std::vector<RequestId> finish_order_;
};

// The serial reference: what one request must produce on FakeBackend `geometry` (its vocab and logit scale).
inline std::vector<TokenId> serial_reference(const FakeBackend& fake, const Request& r) {
  const std::vector<TokenId>& eos = fake.info().eos_ids;
  const uint64_t seed = r.seed.has_value() ? *r.seed : seed_from_prompt(r.prompt);
  uint64_t h = FakeBackend::kFakeRoot;
  int64_t position = 0;
  const int64_t dim = fake.info().embed_dim;
  for (size_t i = 0; i + 1 < r.prompt.size(); ++i) {
    h = FakeBackend::chain(h, position, r.prompt[i]);
    for (const PromptEmbeds& e : r.embeds)  // a given row mixes in its values
      if (position >= e.start && position < e.start + e.count)
        h ^= FakeBackend::embed_mix(std::span<const uint16_t>(*e.values).subspan(
                                        static_cast<size_t>((position - e.start) * dim), static_cast<size_t>(dim)),
                                    e.image);
    ++position;
  }
  TokenId feed = r.prompt.back();
  std::vector<TokenId> out;
  std::vector<TokenId> forced(r.forced_tokens.begin(), r.forced_tokens.end());
  size_t forced_at = 0;
  size_t free_from = 0;  // outputs before this index include a forced token
  bool thinking = r.thinking.max_tokens >= 0;
  int32_t think_count = 0;
  const int64_t max_rows = std::min<int64_t>(static_cast<int64_t>(r.prompt.size()) + r.max_tokens,
                                             fake.info().max_context);
  for (;;) {
    h = FakeBackend::chain(h, position, feed);
    TokenId token = sample_keyed(fake.logits(h), r.sampling, seed, position + 1);
    const bool is_forced = forced_at < forced.size();
    if (is_forced) token = forced[forced_at++];
    ++position;
    out.push_back(token);
    // A forced token never finishes by EOS or a stop sequence, and a sequence matches only after the last one.
    if (is_forced) free_from = out.size();
    if (!is_forced && !r.ignore_eos &&
        (std::count(eos.begin(), eos.end(), token) || std::count(r.eos_ids.begin(), r.eos_ids.end(), token))) break;
    bool stopped = false;
    for (const auto& seq : r.stop_sequences) {
      if (!is_forced && out.size() - free_from >= seq.size() && std::equal(seq.begin(), seq.end(), out.end() - seq.size()))
        stopped = true;
    }
    if (stopped) break;
    if (static_cast<int64_t>(out.size()) >= r.max_tokens ||
        static_cast<int64_t>(r.prompt.size() + out.size()) >= max_rows) break;
    if (thinking) {
      if (token == r.thinking.end_token) {
        thinking = false;
      } else if (++think_count >= r.thinking.max_tokens) {
        thinking = false;
        forced.insert(forced.begin() + static_cast<ptrdiff_t>(forced_at), r.thinking.close_tokens.begin(),
                      r.thinking.close_tokens.end());
      }
    }
    feed = token;
  }
  return out;
}

}  // namespace dsv4::lanes::testing
