// The lane host's round loop: admission, pieces, one verify, conclusions, drafts; plus the thread and drain.
#include "lanes/lane_host.h"

#include <algorithm>

#include "lanes/choices.h"
#include "lanes/prompt_embeds.h"

namespace dsv4::lanes {
namespace {

Finish ended(FinishReason reason, std::string message) {
  Finish finish;
  finish.reason = reason;
  finish.message = std::move(message);
  return finish;
}

}  // namespace

std::vector<cache::RowTableShape> cache_row_tables(const BackendInfo& info) {
  std::vector<cache::RowTableShape> shapes;
  for (const RowTable& t : info.row_tables) shapes.push_back({t.positions_per_row, t.row_bytes});
  return shapes;
}

LaneHost::LaneHost(Backend& backend, LaneHostOptions options)
    : backend_(backend),
      info_(backend.info()),
      options_(std::move(options)),
      clock_(options_.clock != nullptr ? *options_.clock : steady_) {
  if (options_.prefill_rows <= 0 || options_.prefill_rows > info_.max_prefill_rows) {
    options_.prefill_rows = info_.max_prefill_rows;
  }
  options_.max_batch_streams = std::max(1, options_.max_batch_streams);
  DSV4_CHECK(info_.max_verify_rows >= 2);  // a forced token needs its row and the pending row
  if (options_.step_rows > 0) options_.step_rows = std::max(2, options_.step_rows);
  budget_.prefill_rows = options_.prefill_rows;
  budget_.step_rows = options_.step_rows;
  budget_.step_ns = std::max<int64_t>(0, options_.step_ns);
  // A row budget lowers the floor to half of it, so a step holds at most 1.5 times a small budget.
  budget_.floor_rows = std::clamp<int64_t>(options_.min_step_prefill_rows, 1, options_.prefill_rows);
  if (options_.step_rows > 0) budget_.floor_rows = std::min<int64_t>(budget_.floor_rows, options_.step_rows / 2);
  verify_rows_ = options_.step_rows > 0 ? std::min(info_.max_verify_rows, options_.step_rows) : info_.max_verify_rows;
  if (options_.cache != nullptr) {
    // The cache must split snapshots exactly as the backend does (options.row_tables from info().row_tables).
    const std::vector<cache::RowTableShape>& shapes = options_.cache->row_tables();
    bool same = shapes.size() == info_.row_tables.size();
    for (size_t t = 0; same && t < shapes.size(); ++t) {
      same = shapes[t].positions_per_row == info_.row_tables[t].positions_per_row &&
             shapes[t].row_bytes == info_.row_tables[t].row_bytes;
    }
    DSV4_CHECK(same);
  }
}

LaneHost::~LaneHost() { stop(); }

StatusOr<RequestId> LaneHost::submit(Request request, std::shared_ptr<EventSink> sink) {
  DSV4_RETURN_IF_ERROR(validate(request));
  std::lock_guard lock(mutex_);
  if (draining_ || halted_) return error(StatusCode::unavailable, "the engine is draining");
  if (queued_count_ >= options_.max_queue) {
    return error(StatusCode::resource_exhausted, "the queue holds {} requests already", queued_count_);
  }
  const RequestId id = next_id_;
  next_id_ += static_cast<RequestId>(request.n);  // member i is id + i
  in_flight_ += request.n;
  ++queued_count_;
  inbox_.push_back({id, std::move(request), std::move(sink)});
  wake_.notify_all();
  return id;
}

void LaneHost::cancel(RequestId id) {
  std::lock_guard lock(mutex_);
  cancels_.push_back(id);
  wake_.notify_all();
}

EngineStatus LaneHost::status() const {
  std::lock_guard lock(mutex_);
  EngineStatus s = published_;
  s.draining = draining_;
  s.queued = static_cast<int32_t>(queued_count_);
  return s;
}

void LaneHost::begin_drain(std::chrono::milliseconds grace) {
  std::lock_guard lock(mutex_);
  if (!draining_) {
    draining_ = true;
    drain_deadline_ns_ = clock_.now_ns() + std::chrono::duration_cast<std::chrono::nanoseconds>(grace).count();
  }
  wake_.notify_all();
}

Status LaneHost::drain(std::chrono::milliseconds grace) {
  begin_drain(grace);
  std::unique_lock lock(mutex_);
  if (thread_.joinable()) {
    idle_.wait(lock, [&] { return in_flight_ == 0; });
  } else {
    lock.unlock();
    run_until_idle();
    lock.lock();
  }
  if (halted_requests_ > 0) {
    return error(StatusCode::unavailable, "drain deadline passed: {} requests halted", halted_requests_);
  }
  return ok_status();
}

void LaneHost::start() {
  std::lock_guard lock(mutex_);
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { thread_main(); });
}

void LaneHost::stop() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    wake_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void LaneHost::thread_main() {
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || !inbox_.empty() || !cancels_.empty() || in_flight_ > 0; });
      if (stop_) return;
    }
    step();
  }
}

bool LaneHost::has_work() const {
  return !running_.empty() || !queue_[0].empty() || !queue_[1].empty();
}

void LaneHost::run_until_idle() {
  while (step()) {
  }
}

bool LaneHost::step() {
  take_inbox();
  bool deadline_passed = false;
  {
    std::lock_guard lock(mutex_);
    deadline_passed = draining_ && clock_.now_ns() >= drain_deadline_ns_;
  }
  if (deadline_passed && has_work()) {
    halt_all();
  } else if (has_work()) {
    admit();
    run_step();
    drop_finished();
    run_drafts();
    ++round_;
    counters_.rounds = round_;
  }
  publish();
  std::lock_guard lock(mutex_);
  return has_work() || !inbox_.empty();
}

void LaneHost::take_inbox() {
  std::vector<Submitted> inbox;
  std::vector<RequestId> cancels;
  {
    std::lock_guard lock(mutex_);
    inbox.swap(inbox_);
    cancels.swap(cancels_);
  }
  for (Submitted& sub : inbox) {
    auto stream = std::make_unique<Stream>();
    stream->id = sub.id;
    stream->group = sub.id;
    stream->request = std::move(sub.request);
    stream->sink = std::move(sub.sink);
    const Request& r = stream->request;
    stream->seed = r.seed.has_value() ? *r.seed : seed_from_prompt(r.prompt);
    stream->max_rows = std::min<int64_t>(static_cast<int64_t>(r.prompt.size()) + r.max_tokens, info_.max_context);
    stream->reserved_bytes = backend_.stream_bytes(stream->max_rows);
    if (options_.cache != nullptr) stream->keys = prompt_keys(r);
    queue_[r.priority == Priority::background ? 1 : 0].push_back(std::move(stream));
  }
  for (RequestId id : cancels) {
    for (auto& queue : queue_) {
      auto it = std::find_if(queue.begin(), queue.end(), [&](const auto& s) { return s->id == id; });
      if (it != queue.end()) {
        std::unique_ptr<Stream> stream = std::move(*it);
        queue.erase(it);
        finish_unadmitted(std::move(stream), FinishReason::cancelled, "cancelled");
      }
    }
    for (auto& stream : running_) {
      if (stream && (stream->id == id || stream->group == id)) finish(*stream, ended(FinishReason::cancelled, "cancelled"));
    }
  }
  drop_finished();
}

void LaneHost::halt_all() {
  int64_t halted = 0;
  for (auto& queue : queue_) {
    while (!queue.empty()) {
      std::unique_ptr<Stream> stream = std::move(queue.front());
      queue.pop_front();
      finish_unadmitted(std::move(stream), FinishReason::error, "halted: drain deadline passed");
      ++halted;
    }
  }
  for (auto& stream : running_) {
    finish(*stream, ended(FinishReason::error, "halted: drain deadline passed"));
    ++halted;
  }
  drop_finished();
  std::lock_guard lock(mutex_);
  halted_ = true;
  halted_requests_ += halted;
}

void LaneHost::admit() {
  for (auto& queue : queue_) {
    while (!queue.empty()) {
      Stream& s = *queue.front();
      // All n members of a request are admitted together.
      if (static_cast<int32_t>(running_.size()) + s.request.n > info_.max_streams) return;
      if (reserved_bytes_ + s.reserved_bytes * s.request.n > info_.memory_budget_bytes) return;  // head of line waits
      std::unique_ptr<Stream> stream = std::move(queue.front());
      queue.pop_front();
      {
        std::lock_guard lock(mutex_);
        --queued_count_;
      }
      stream->sid = next_sid_++;
      stream->seq = next_seq_++;
      const Request& r = stream->request;
      Status opened = backend_.open(stream->sid, StreamSpec{r.sampling, stream->seed, stream->max_rows});
      if (!opened.ok()) {
        finish_unadmitted(std::move(stream), FinishReason::error, opened.to_string());
        continue;
      }
      reserved_bytes_ += stream->reserved_bytes;
      stream->usage.prompt_tokens = static_cast<int64_t>(r.prompt.size());
      stream->forced.assign(r.forced_tokens.begin(), r.forced_tokens.end());
      stream->thinking = r.thinking.max_tokens >= 0;
      stream->choosing = !r.choices.empty();
      if (r.constraint != nullptr && r.constraint_after < 0) stream->cursor = r.constraint->start();
      if (r.draft && info_.max_draft_depth > 0) {
        const int32_t depth = std::min<int32_t>(info_.max_draft_depth, static_cast<int32_t>(verify_rows_) - 1);
        stream->depth.emplace(depth, info_.window_cost);
      }
      const int64_t prompt_rows = static_cast<int64_t>(r.prompt.size()) - 1;
      if (options_.cache != nullptr && prompt_rows >= options_.cache->page_tokens()) {
        counters_.cache_lookups++;
        std::optional<cache::CacheHit> hit = options_.cache->lookup(stream->keys, prompt_rows);
        if (hit.has_value()) {
          Status restored =
              info_.row_tables.empty()
                  ? backend_.restore(stream->sid, *hit->bytes, hit->rows)
                  : backend_.restore_parts(stream->sid, *hit->bytes, std::span<const RowChunks>(hit->tables), hit->rows);
          if (restored.ok()) {
            stream->rows = hit->rows;
            stream->usage.cached_prompt_tokens = hit->rows;
            counters_.cache_hits++;
            counters_.cache_hit_tokens += hit->rows;
          } else {
            options_.cache->discard(std::span(stream->keys).first(static_cast<size_t>(hit->rows)));
          }
        }
      }
      if (stream->rows == prompt_rows) {
        stream->decoding = true;
        stream->pending = r.prompt.back();
      }
      Stream& first = *stream;
      running_.push_back(std::move(stream));
      if (first.request.n > 1) admit_members(first);
    }
  }
}

void LaneHost::run_step() {
  // Windows first: decoding streams never wait for a prompt; the pieces take what the step budget leaves.
  std::vector<Window> windows;
  std::vector<Stream*> decoding;
  choose_windows(windows, decoding);
  int64_t verify_rows = 0;
  for (const Window& w : windows) verify_rows += static_cast<int64_t>(w.tokens.size());
  const int64_t chunk = prefill_chunk(budget_, costs_, verify_rows);
  std::vector<Piece> pieces;
  std::vector<Stream*> filling;
  choose_pieces(chunk, pieces, filling);
  if (pieces.empty() && windows.empty()) return;
  int64_t prefill_rows = 0;
  for (const Piece& p : pieces) prefill_rows += static_cast<int64_t>(p.tokens.size());
  if (!pieces.empty()) counters_.prefill_chunk_rows = chunk;
  std::vector<std::vector<RowResult>> results;
  const int64_t began = clock_.now_ns();
  Status status = backend_.step(pieces, windows, &results);
  if (status.ok()) costs_.observe(prefill_rows, verify_rows, clock_.now_ns() - began);
  if (status.ok() && results.size() != windows.size())
    status = error(StatusCode::internal, "a step returned {} windows for {}", results.size(), windows.size());
  if (!status.ok()) {
    for (Stream* s : filling) finish(*s, ended(FinishReason::error, status.to_string()));
    for (Stream* s : decoding) finish(*s, ended(FinishReason::error, status.to_string()));
    return;
  }
  after_pieces(pieces, filling);
  for (size_t i = 0; i < windows.size(); ++i) conclude(*decoding[i], windows[i], results[i]);
}

Window LaneHost::build_window(Stream& s) const {
  Window w;
  w.stream = s.sid;
  w.start = s.rows;
  w.logprobs = s.request.logprobs;
  w.top_logprobs = s.request.top_logprobs;
  w.tokens.push_back(s.pending);
  // Tokens the stream may still commit (it may reach position max_rows - 1); r rows commit up to r tokens.
  const int64_t remaining = s.max_rows - 1 - s.rows;
  const int64_t cap = verify_rows_ - 1;
  if (!s.forced.empty()) {
    // n forced rows commit n forced tokens, then the last row's draw (cut when the length is reached).
    const int64_t n = std::min({static_cast<int64_t>(s.forced.size()), remaining, cap});
    w.tokens.insert(w.tokens.end(), s.forced.begin(), s.forced.begin() + n);
  } else if (!s.held.tokens.empty()) {
    // n drafts commit at most n + 1 tokens.
    const int64_t n = std::min({static_cast<int64_t>(s.held.tokens.size()), remaining - 1, cap});
    if (n > 0) w.tokens.insert(w.tokens.end(), s.held.tokens.begin(), s.held.tokens.begin() + n);
  }
  if (s.choosing) {
    // The rows whose draws may be kept take their draws among the tokens that continue a choice.
    const size_t first = s.forced.empty() ? 0 : w.tokens.size() - 1;
    for (std::vector<TokenId>& ids : window_masks(s.request.choices, s.spelled, w.tokens, first)) {
      w.allowed.push_back(ids.empty() ? nullptr : std::make_shared<const TokenMask>(TokenMask::of(info_.vocab_size, ids)));
    }
  }
  if (s.request.constraint != nullptr) {
    const size_t first = s.forced.empty() ? 0 : w.tokens.size() - 1;
    w.allowed = constraint_masks(s, w.tokens, first);
  }
  return w;
}

void LaneHost::choose_windows(std::vector<Window>& windows, std::vector<Stream*>& owners) {
  std::vector<Stream*> ready;
  for (auto& stream : running_) {
    if (stream->decoding) ready.push_back(stream.get());
  }
  // Least recently served first; admission order breaks ties.
  std::sort(ready.begin(), ready.end(), [](const Stream* a, const Stream* b) {
    return a->last_served != b->last_served ? a->last_served < b->last_served : a->seq < b->seq;
  });
  int64_t rows_left = verify_rows_;
  for (Stream* s : ready) {
    if (static_cast<int32_t>(windows.size()) >= options_.max_batch_streams) break;
    Window w = build_window(*s);
    if (static_cast<int64_t>(w.tokens.size()) > rows_left) break;  // it goes first next round
    rows_left -= static_cast<int64_t>(w.tokens.size());
    windows.push_back(std::move(w));
    owners.push_back(s);
  }
}

void LaneHost::conclude(Stream& s, const Window& w, const std::vector<RowResult>& rows) {
  const bool forced_window = !s.forced.empty();
  const int32_t drafts = forced_window ? 0 : static_cast<int32_t>(w.tokens.size()) - 1;
  if (rows.size() != w.tokens.size()) {
    finish(s, ended(FinishReason::error, fmt::format("verify returned {} rows for a window of {}", rows.size(),
                                                      w.tokens.size())));
    return;
  }
  std::vector<TokenEvent> events;
  Finish done;
  CommitOutcome outcome = CommitOutcome::more;
  int32_t accepted = 0;
  for (size_t i = 0; i < rows.size() && outcome == CommitOutcome::more; ++i) {
    // Forced tokens left beyond this window: the last row's draw is not the next output.
    if (forced_window && i + 1 == w.tokens.size() && !s.forced.empty()) break;
    const RowResult& row = rows[i];
    TokenEvent ev;
    ev.top = row.top;
    ev.choice = s.choice;
    bool last = true;
    if (i + 1 < w.tokens.size() && forced_window) {
      ev.token = w.tokens[i + 1];
      ev.logprob = row.proposed_logprob;
      ev.forced = true;
      s.forced.pop_front();
      last = false;
    } else if (i + 1 < w.tokens.size() && row.token == w.tokens[i + 1]) {
      ev.token = row.token;
      ev.logprob = row.logprob;
      ++accepted;
      last = false;
    } else {
      ev.token = row.token;
      ev.logprob = row.logprob;
    }
    if (s.request.constraint != nullptr) {
      std::string broken = constraint_commit(s, ev.token, ev.forced);
      if (!broken.empty()) {
        finish(s, ended(FinishReason::error, std::move(broken)));
        return;
      }
    }
    if (s.choosing && !ev.forced) {
      s.spelled.push_back(ev.token);
      const ChoiceStep step = choice_step(s.request.choices, s.spelled);
      if (step.complete) {
        s.choosing = false;
      } else if (step.next.empty()) {
        finish(s, ended(FinishReason::error, fmt::format("the backend drew token {}, which no choice allows here",
                                                          ev.token)));
        return;
      }
    }
    outcome = commit_token(s, ev.token, info_.eos_ids, options_.token_bytes, &done, ev.forced);
    events.push_back(std::move(ev));
    if (last && outcome == CommitOutcome::more) break;
  }
  s.usage.verify_rounds++;
  s.usage.drafted_tokens += drafts;
  s.usage.accepted_tokens += accepted;
  counters_.drafted_tokens += drafts;
  counters_.accepted_tokens += accepted;
  counters_.generated_tokens += static_cast<int64_t>(events.size());
  if (drafts > 0 && s.depth.has_value()) s.depth->observe(drafts, accepted);
  s.held = DraftProposal{};
  s.depth_decided = false;
  s.last_served = round_;
  events.back().last = outcome == CommitOutcome::finished;
  if (s.sink) s.sink->on_tokens(s.id, events);
  if (outcome == CommitOutcome::finished) {
    finish(s, std::move(done));
    return;
  }
  const int64_t kept = w.start + static_cast<int64_t>(events.size());
  Status status = backend_.keep(s.sid, kept);
  if (!status.ok()) {
    finish(s, ended(FinishReason::error, status.to_string()));
    return;
  }
  s.rows = kept;
  s.pending = events.back().token;
}

void LaneHost::run_drafts() {
  std::vector<DraftRequest> requests;
  std::vector<Stream*> owners;
  for (auto& stream : running_) {
    Stream& s = *stream;
    if (!s.decoding || !s.depth.has_value() || s.depth_decided || !s.forced.empty()) continue;
    s.depth_decided = true;
    const int32_t depth = s.depth->next_depth();
    if (depth == 0) continue;
    requests.push_back(DraftRequest{s.sid, s.pending, s.rows, depth});
    owners.push_back(&s);
  }
  if (requests.empty()) return;
  std::vector<DraftProposal> proposals;
  Status status = backend_.draft(requests, &proposals);
  if (!status.ok() || proposals.size() != requests.size()) return;  // drafts only propose: run without them
  for (size_t i = 0; i < owners.size(); ++i) owners[i]->held = std::move(proposals[i]);
}

void LaneHost::finish(Stream& s, Finish done) {
  if (s.sid == 0) return;  // already finished this round
  backend_.release(s.sid);
  reserved_bytes_ -= s.reserved_bytes;
  s.sid = 0;
  done.usage = s.usage;
  done.choice = s.choice;
  if (s.sink) s.sink->on_finish(s.id, done);
  // Members still waiting for this one's prompt (it failed or was cancelled alone) fill it themselves.
  if (s.request.n > 1 && s.choice == 0) {
    for (auto& other : running_) {
      if (other->group == s.id && other->awaiting_prompt) other->awaiting_prompt = false;
    }
  }
  std::lock_guard lock(mutex_);
  --in_flight_;
  if (in_flight_ == 0) idle_.notify_all();
}

void LaneHost::finish_unadmitted(std::unique_ptr<Stream> stream, FinishReason reason, std::string message) {
  Finish done = ended(reason, std::move(message));
  done.usage = stream->usage;
  done.usage.prompt_tokens = static_cast<int64_t>(stream->request.prompt.size());
  // A request that never ran finishes all its members (members are opened only after the first).
  const int32_t members = stream->choice == 0 ? stream->request.n : 1;
  for (int32_t i = 0; i < members; ++i) {
    done.choice = stream->choice + i;
    if (stream->sink) stream->sink->on_finish(stream->id + static_cast<RequestId>(i), done);
  }
  std::lock_guard lock(mutex_);
  if (stream->sid == 0) --queued_count_;
  in_flight_ -= members;
  if (in_flight_ == 0) idle_.notify_all();
}

void LaneHost::drop_finished() {
  std::erase_if(running_, [](const std::unique_ptr<Stream>& s) { return s->sid == 0; });
}

void LaneHost::publish() {
  EngineStatus s = counters_;
  s.running = static_cast<int32_t>(running_.size());
  if (options_.cache != nullptr) {
    const cache::PromptCacheStats c = options_.cache->stats();
    s.cache_discarded = c.discarded;
    s.cache_ram_bytes = c.ram_bytes;
    s.cache_disk_bytes = c.disk_bytes;
    s.cache_entries = c.ram_entries + c.disk_entries;
  }
  std::lock_guard lock(mutex_);
  s.halted = halted_;
  published_ = s;
}

}  // namespace dsv4::lanes
