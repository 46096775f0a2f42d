// The scripted fake engine for HTTP-layer tests (see fake_engine.h).
#include "server/fake_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include "lanes/fanout.h"

namespace dsv4::server {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t mix(uint64_t x) {  // SplitMix64 finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string prompt_text(const std::vector<int32_t>& prompt) {
  std::string s;
  for (int32_t t : prompt)
    if (t >= 0 && t < 256) s += static_cast<char>(t);
  return s;
}

// "[[name=N]]" in the prompt, or -1.
int32_t directive(const std::string& text, const std::string& name) {
  size_t at = text.rfind("[[" + name + "=");
  if (at == std::string::npos) return -1;
  return std::atoi(text.c_str() + at + name.size() + 3);
}

std::string words(uint64_t key, int32_t count) {
  static const char* kWords[] = {"alpha", "beta",  "gamma", "delta", "river", "stone", "light",
                                 "cloud", "north", "ember", "quiet", "orbit", "maple", "tide",
                                 "amber", "frost"};
  std::string out;
  for (int32_t i = 0; i < count; ++i) {
    key = mix(key);
    if (i) out += ' ';
    out += kWords[key % 16];
  }
  return out;
}

// The reply the fake "model" gives to a prompt (see fake_engine.h).
std::string reply_text(const std::string& text, uint64_t key) {
  const std::string assistant = "<|assistant|>";
  size_t a = text.rfind(assistant);
  if (a == std::string::npos) {  // a completions prompt
    size_t say = text.rfind("say:");
    return say != std::string::npos ? text.substr(say + 4) : words(key, 8 + mix(key) % 24);
  }
  std::string body = text.substr(0, a);
  if (!body.empty() && body.back() == '\n') body.pop_back();
  size_t start = body.rfind("<|");
  std::string role, content;
  if (start != std::string::npos) {
    size_t close = body.find("|>", start);
    if (close != std::string::npos) {
      role = body.substr(start + 2, close - start - 2);
      content = body.substr(close + 2);
    }
  }
  std::string reply;
  size_t say = content.find("say:"), call = content.find("call:");
  if (role == "tool") reply = "the tool said " + content;
  else if (say != std::string::npos) reply = content.substr(say + 4);
  else if (call != std::string::npos) reply = "<tool>" + content.substr(call + 5) + "</tool>";
  else reply = words(key, 8 + mix(key) % 24);
  bool thinking = text.size() >= 7 && text.compare(text.size() - 7, 7, "<think>") == 0;
  return thinking ? "hmm, let me think</think>" + reply : reply;
}

TokenOut scored(int32_t token, int64_t position, int32_t top_n) {
  uint64_t h = mix(static_cast<uint64_t>(position) * 1000003ull + static_cast<uint64_t>(token));
  double p = 0.5 + 0.4 * static_cast<double>(h >> 11) / static_cast<double>(1ull << 53);
  TokenOut t;
  t.token = token;
  t.logprob = static_cast<float>(std::log(p));
  if (top_n > 0) t.top.push_back({token, t.logprob});
  for (int32_t k = 1; k < top_n; ++k)
    t.top.push_back({(token + k) % 256 == token ? (token + k + 1) % 256 : (token + k) % 256,
                     static_cast<float>(std::log((1 - p) * std::pow(0.5, k)))});
  return t;
}

}  // namespace

struct FakeEngine::Job {
  RequestId id = 0;
  RequestId group = 0;  // the submit's id: candidate `choice` has id group + choice
  int32_t choice = 0;
  GenerationRequest request;
  EventSink sink;
  std::vector<int32_t> script;  // tokens to emit (without the ignore_eos continuation)
  uint64_t key = 0;
  size_t emitted = 0;
  int32_t token_ms = 0;
  Clock::time_point next_at;
  int32_t cached = -1;
  bool cancelled = false;
  std::string output;  // output bytes so far, when the request has stop strings
};

FakeEngine::FakeEngine(FakeEngineOptions options) : options_(options) {
  thread_ = std::thread([this] { loop(); });
}

FakeEngine::~FakeEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

StatusOr<RequestId> FakeEngine::submit(GenerationRequest request, EventSink sink) {
  if (request.n < 1 || request.n > options_.parallel)
    return Status(StatusCode::invalid_argument,
                  "n " + std::to_string(request.n) + " is outside [1, " +
                      std::to_string(options_.parallel) + "] (the engine's parallel requests)");
  // Candidate i is the request with seed member_seed(seed, i), as the lane core runs it.
  std::vector<std::shared_ptr<Job>> jobs;
  const std::string text = prompt_text(request.prompt);
  int32_t prefill = directive(text, "prefill-ms");
  int32_t token_ms = directive(text, "token-ms");
  for (int32_t i = 0; i < request.n; ++i) {
    auto job = std::make_shared<Job>();
    job->choice = i;
    job->request = request;
    job->request.sampling.seed = lanes::member_seed(request.sampling.seed, i);
    const GenerationRequest& r = job->request;
    job->key = fnv1a(text) ^ (r.sampling.temperature > 0 ? mix(r.sampling.seed) : 0);
    if (!r.forced.empty()) {
      job->script = r.forced;
    } else {
      // A constrained start: one of the choices, picked by the reply key, then the usual reply.
      if (!r.choices.empty()) job->script = r.choices[job->key % r.choices.size()];
      for (unsigned char c : reply_text(text, job->key)) job->script.push_back(c);
      job->script.push_back(kFakeEos);
    }
    job->token_ms = token_ms >= 0 ? token_ms : options_.token_ms;
    job->next_at = Clock::now() + std::chrono::milliseconds(prefill >= 0 ? prefill : options_.prefill_ms);
    job->sink = sink;
    jobs.push_back(std::move(job));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (halted_) return Status(StatusCode::unavailable, "the engine has halted");
  if (static_cast<int32_t>(waiting_.size() + jobs.size()) > options_.max_waiting)
    return Status(StatusCode::resource_exhausted, "the engine queue is full");
  const RequestId id = next_id_;
  next_id_ += static_cast<RequestId>(jobs.size());
  for (auto& job : jobs) {
    job->group = id;
    job->id = id + static_cast<RequestId>(job->choice);
    waiting_.push_back(std::move(job));
  }
  cv_.notify_all();
  return id;
}

void FakeEngine::cancel(RequestId id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& j : waiting_)
    if (j->id == id || j->group == id) j->cancelled = true;
  for (auto& j : running_)
    if (j->id == id || j->group == id) j->cancelled = true;
  cv_.notify_all();
}

EngineStats FakeEngine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineStats s = stats_;
  s.waiting = static_cast<int64_t>(waiting_.size());
  s.running = static_cast<int64_t>(running_.size());
  return s;
}

void FakeEngine::halt() {
  std::lock_guard<std::mutex> lock(mu_);
  halted_ = true;
  cv_.notify_all();
}

// One round of one job: 1 token (draft off) or 1-3 tokens (draft on), the same tokens either way.
void FakeEngine::step(Job& job, GenerationEvent& ev) {
  const GenerationRequest& r = job.request;
  size_t n = r.draft ? 1 + mix(job.key ^ job.emitted) % 3 : 1;
  if (job.cached >= 0) {
    ev.cached_prompt_tokens = job.cached;
    job.cached = -1;
  }
  for (size_t i = 0; i < n; ++i) {
    int32_t token;
    if (job.emitted < job.script.size()) {
      token = job.script[job.emitted];
      if (token == kFakeEos && r.ignore_eos) token = ' ';
    } else {
      token = 'a' + static_cast<int32_t>(mix(job.key + job.emitted) % 26);  // ignore_eos filler
    }
    TokenOut t = scored(token, static_cast<int64_t>(job.emitted), r.logprobs ? r.top_logprobs : 0);
    ev.tokens.push_back(t);
    ++job.emitted;
    if (r.draft && i > 0) {  // tokens past the first of a round count as accepted drafts
      ++stats_.draft_tokens;
      ++stats_.draft_accepted;
    }
    // Stop strings, as the lane core matches them: the earliest match the new byte completes.
    if (!r.stop.empty() && token < 256) {
      job.output += static_cast<char>(token);
      int64_t at = -1;
      for (const auto& stop : r.stop) {
        size_t from = job.output.size() >= stop.size() ? job.output.size() - stop.size() : 0;
        size_t found = job.output.find(stop, from);
        if (found != std::string::npos && (at < 0 || static_cast<int64_t>(found) < at))
          at = static_cast<int64_t>(found);
      }
      if (at >= 0) {
        ev.done = true;
        ev.finish = Finish::stop;
        ev.stop_offset = at;
        return;
      }
    }
    bool eos = token == kFakeEos;
    bool forced_done = !r.forced.empty() && job.emitted >= r.forced.size();
    if (eos || forced_done || static_cast<int32_t>(job.emitted) >= r.max_tokens) {
      ev.done = true;
      ev.finish = eos ? Finish::stop : Finish::length;
      return;
    }
  }
}

void FakeEngine::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!quit_) {
    auto now = Clock::now();
    // Admit into the round: a request's candidates together (queued together, the first ahead),
    // the prompt looked up once; the others share the first's prompt and its cached count.
    while (!waiting_.empty() &&
           static_cast<int32_t>(running_.size()) + waiting_.front()->request.n <= options_.parallel) {
      auto job = waiting_.front();
      waiting_.pop_front();
      size_t best = 0;
      for (const auto& p : recent_prompts_) {
        size_t k = 0;
        while (k < p.size() && k < job->request.prompt.size() && p[k] == job->request.prompt[k]) ++k;
        best = std::max(best, k);
      }
      job->cached = static_cast<int32_t>(std::min(best, job->request.prompt.size() - 1));
      stats_.prompt_cache_queries += 1;
      stats_.prompt_cache_hits += job->cached > 0 ? 1 : 0;
      recent_prompts_.push_back(job->request.prompt);
      stats_.prompt_cache_bytes += static_cast<int64_t>(job->request.prompt.size()) * 4;
      if (recent_prompts_.size() > 32) {
        stats_.prompt_cache_bytes -= static_cast<int64_t>(recent_prompts_.front().size()) * 4;
        recent_prompts_.pop_front();
      }
      running_.push_back(job);
      for (int32_t i = 1; i < job->request.n && !waiting_.empty(); ++i) {
        auto member = waiting_.front();
        waiting_.pop_front();
        member->cached = job->cached;
        running_.push_back(member);
      }
    }
    std::vector<std::pair<std::shared_ptr<Job>, GenerationEvent>> out;
    Clock::time_point wake = now + std::chrono::seconds(1);
    bool any_step = false;
    for (auto it = running_.begin(); it != running_.end();) {
      auto job = *it;
      GenerationEvent ev;
      if (halted_) {
        ev.done = true;
        ev.finish = Finish::error;
        ev.error = Status(StatusCode::unavailable, "the engine halted (the server is shutting down)");
      } else if (job->cancelled) {
        ev.done = true;
        ev.finish = Finish::cancelled;
      } else if (now >= job->next_at) {
        step(*job, ev);
        any_step = true;
        job->next_at = now + std::chrono::milliseconds(job->token_ms);
      } else {
        wake = std::min(wake, job->next_at);
        ++it;
        continue;
      }
      wake = std::min(wake, job->next_at);
      bool done = ev.done;
      out.emplace_back(job, std::move(ev));
      it = done ? running_.erase(it) : std::next(it);
    }
    if (halted_)
      for (auto& job : waiting_) {
        GenerationEvent ev;
        ev.done = true;
        ev.finish = Finish::error;
        ev.error = Status(StatusCode::unavailable, "the engine halted (the server is shutting down)");
        out.emplace_back(job, std::move(ev));
      }
    if (halted_) waiting_.clear();
    if (any_step) ++stats_.rounds;
    // Deliver outside the lock: sinks may call back into cancel().
    lock.unlock();
    for (auto& [job, ev] : out) {
      ev.choice = job->choice;
      job->sink(std::move(ev));
    }
    lock.lock();
    if (out.empty() || !any_step)
      cv_.wait_until(lock, wake, [&] {
        if (quit_ || (halted_ && !(running_.empty() && waiting_.empty()))) return true;
        if (!waiting_.empty() && static_cast<int32_t>(running_.size()) < options_.parallel) return true;
        for (auto& j : running_)
          if (j->cancelled) return true;
        return false;
      });
  }
}

}  // namespace dsv4::server
