// The lane host: one engine thread runs rounds (admission, one step of prompt pieces and verify windows, drafts)
// for every request.
//
// A round: take submissions and cancels -> halt if the drain deadline passed -> admit in queue order
// (foreground before background, FIFO, head-of-line waits for a slot and memory) -> one step: pieces of
// prompts still filling together with the windows of the least recently served decoding streams -> conclude
// each window (accept drafts, commit, finish rules, keep) -> one draft call for the next round.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cache/prompt_cache.h"
#include "lanes/backend.h"
#include "lanes/clock.h"
#include "lanes/engine_api.h"
#include "lanes/step_budget.h"
#include "lanes/stream.h"

namespace dsv4::lanes {

// The prompt cache's row tables for a backend (PromptCacheOptions::row_tables must equal them).
std::vector<cache::RowTableShape> cache_row_tables(const BackendInfo& info);

struct LaneHostOptions {
  int32_t max_batch_streams = 32;     // windows per verify call
  int32_t prefill_rows = 0;           // prompt rows per round (all pieces); 0 = backend max_prefill_rows
  // The per-step budget (lanes/step_budget.h): windows first, then prompt pieces within what is left, at least
  // min_step_prefill_rows of them while a prompt fills. A row budget also caps the windows' rows (values below 2
  // count as 2: a forced token needs its row and the pending row); a step then holds at most step_rows rows, or
  // its windows plus the floor when they leave less than the floor.
  int32_t step_rows = 0;              // rows per step, windows and pieces together; 0 = no row budget
  int64_t step_ns = 0;                // predicted time of a step's backend call (the clock's nanoseconds; drafts and
                                      // snapshots are not counted); 0 = no time budget
  int32_t min_step_prefill_rows = 64;  // the floor: one 64-row tile of the prefill GEMMs, the default cache page;
                                       // at most prefill_rows, and at most step_rows / 2 when that is set
  int32_t max_queue = 4096;           // queued requests before submit refuses
  TokenBytesFn token_bytes;           // token -> output bytes; required for requests with stop strings
  cache::PromptCache* cache = nullptr;  // prompt cache (not owned); null = none; its options.row_tables must be
                                        // cache_row_tables(backend.info()) (checked)
  const Clock* clock = nullptr;       // deadlines; null = steady clock
};

class LaneHost final : public Engine {
 public:
  // `backend` must outlive the host; the host is its only caller.
  LaneHost(Backend& backend, LaneHostOptions options);
  ~LaneHost() override;

  StatusOr<RequestId> submit(Request request, std::shared_ptr<EventSink> sink) override;
  void cancel(RequestId id) override;
  EngineStatus status() const override;
  Status drain(std::chrono::milliseconds grace) override;

  // Starts the engine thread (rounds run while work exists).
  void start();
  // Stops the engine thread after its current round; unfinished requests stay as they are.
  void stop();
  // Without start(): runs one round on the calling thread; returns whether work remains.
  bool step();
  // Without start(): steps until no request is queued or running.
  void run_until_idle();
  // Refuses new submissions and sets the halt deadline `grace` from now (drain() without waiting).
  void begin_drain(std::chrono::milliseconds grace);

 private:
  struct Submitted {
    RequestId id;
    Request request;
    std::shared_ptr<EventSink> sink;
  };
  Status validate(const Request& request) const;
  void take_inbox();
  void halt_all();
  void admit();
  // One backend step: verify windows of the decoding streams and prompt pieces of the streams still filling (within
  // the rows the step budget leaves them), then each piece's bookkeeping and each window's conclusion.
  void run_step();
  // Pieces of the filling streams in admission order, `rows` rows at most in all.
  void choose_pieces(int64_t rows, std::vector<Piece>& pieces, std::vector<Stream*>& owners);
  void after_pieces(const std::vector<Piece>& pieces, const std::vector<Stream*>& owners);
  void choose_windows(std::vector<Window>& windows, std::vector<Stream*>& owners);
  void run_drafts();
  // Keeps the stream's snapshot at `prefix` (its rows) in the prompt cache, whole or split.
  void keep_snapshot(StreamId sid, std::span<const cache::Key> prefix);
  // Request::n > 1: opens the other members beside the admitted first (lane_host_fanout.cc).
  void admit_members(Stream& first);
  // The first member holds the prompt's rows: copy its state into the members waiting for it.
  void share_prompt(Stream& first);
  Window build_window(Stream& stream) const;
  // The masks of a window's rows from `first` on under the stream's token constraint (lane_host_constraint.cc).
  std::vector<std::shared_ptr<const TokenMask>> constraint_masks(const Stream& stream, const std::vector<TokenId>& tokens,
                                                                 size_t first) const;
  // What `cursor` allows next, end-of-sequence tokens added where its output is whole; null when it allows nothing.
  std::shared_ptr<const TokenMask> constraint_mask(const Stream& stream, ConstraintCursor& cursor) const;
  // Moves the stream's constraint past a committed token; an error message when the token breaks it.
  std::string constraint_commit(Stream& stream, TokenId token, bool forced) const;
  void conclude(Stream& stream, const Window& window, const std::vector<RowResult>& rows);
  void finish(Stream& stream, Finish finish);
  void finish_unadmitted(std::unique_ptr<Stream> stream, FinishReason reason, std::string message);
  void drop_finished();
  void publish();
  void thread_main();
  bool has_work() const;

  Backend& backend_;
  const BackendInfo& info_;
  LaneHostOptions options_;
  SteadyClock steady_;
  const Clock& clock_;
  StepBudget budget_;
  int64_t verify_rows_ = 0;  // most window rows a step takes: the backend's, cut by the row budget

  // Shared with submitting threads (mutex_).
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::vector<Submitted> inbox_;
  std::vector<RequestId> cancels_;
  RequestId next_id_ = 1;
  int64_t in_flight_ = 0;         // submitted and not finished
  int64_t queued_count_ = 0;      // submitted and not admitted
  bool draining_ = false;
  int64_t drain_deadline_ns_ = 0;
  int64_t halted_requests_ = 0;
  bool stop_ = false;
  bool halted_ = false;            // the drain deadline passed; written by the engine thread
  EngineStatus published_;
  std::thread thread_;

  // Engine-thread state.
  std::deque<std::unique_ptr<Stream>> queue_[2];  // [foreground, background]
  std::vector<std::unique_ptr<Stream>> running_;  // admission order
  int64_t reserved_bytes_ = 0;
  int64_t round_ = 0;
  int64_t next_seq_ = 0;
  StreamId next_sid_ = 1;
  EngineStatus counters_;
  StepCosts costs_;  // timed steps
};

}  // namespace dsv4::lanes
