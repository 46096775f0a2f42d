// The lane core's Backend contract (lanes/backend.h) over any StreamForward (the CPU oracle, the
// CUDA forward): prompt pieces and verify windows in one step with keyed draws, keep, DSpark proposals, snapshots
// (split when the forward names row tables: the Engram history and the compressed and index-key rows of the
// family's StateGeometry). Every call maps onto one StreamForward call; prompt pieces carry their given embedding
// rows (an image's span) through, windows never have any.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/stream_forward.h"
#include "lanes/backend.h"

namespace dsv4::engine {

struct LaneBackendOptions {
  std::string model_id;              // names the weights: prompt-cache entries of other weights are refused
  std::vector<int32_t> eos_ids = {1};  // the model's end-of-sequence ids
  bool drafts = true;                // offer the DSpark head when the weights carry one
  int32_t max_streams = 16;
  int64_t max_context = 1 << 20;
  int32_t max_verify_rows = 64;
  int32_t max_prefill_rows = 4096;
  int64_t memory_budget_bytes = int64_t{8} << 30;
  // Rows that need only a token (greedy, or keyed sampling without top-k / top-p / min-p; no logprobs, no token mask)
  // are reduced where the logits are (the forward's RowDraw: argmax, Gumbel candidates) and decided here with the
  // host sampler's arithmetic: the same tokens. Off: every row comes whole (tests compare both ways).
  bool reduce_rows = true;
  // Threads drawing whole rows (each row independently, so the draws do not depend on it); 1: the calling thread only.
  int32_t draw_threads = 4;
};

class LaneBackend final : public lanes::Backend {
 public:
  // Any forward; max_rollback is the forward's (sizes the per-stream byte estimate).
  static StatusOr<std::unique_ptr<LaneBackend>> create(std::unique_ptr<StreamForward> forward,
                                                       int64_t max_rollback, const LaneBackendOptions& options);

  const lanes::BackendInfo& info() const override { return info_; }
  int64_t stream_bytes(int64_t rows) const override;
  Status open(lanes::StreamId stream, const lanes::StreamSpec& spec) override;
  Status prefill(std::span<const lanes::Piece> pieces) override;
  Status verify(std::span<const lanes::Window> windows, std::vector<std::vector<lanes::RowResult>>* out) override;
  Status step(std::span<const lanes::Piece> pieces, std::span<const lanes::Window> windows,
              std::vector<std::vector<lanes::RowResult>>* out) override;
  Status keep(lanes::StreamId stream, int64_t rows) override;
  Status draft(std::span<const lanes::DraftRequest> requests, std::vector<lanes::DraftProposal>* out) override;
  StatusOr<std::vector<uint8_t>> snapshot(lanes::StreamId stream) override;
  Status restore(lanes::StreamId stream, std::span<const uint8_t> bytes, int64_t rows) override;
  StatusOr<lanes::SnapshotParts> snapshot_parts(lanes::StreamId stream, int64_t from) override;
  Status restore_parts(lanes::StreamId stream, std::span<const uint8_t> bounded,
                       std::span<const lanes::RowChunks> tables, int64_t rows) override;
  void release(lanes::StreamId stream) override;

 private:
  struct Slot {
    int32_t fwd_stream = 0;
    lanes::StreamSpec spec;
  };
  StatusOr<Slot*> find(lanes::StreamId stream);
  // The end of a restore of s (st: the forward's verdict): ok when the stream then holds `rows` rows;
  // otherwise the stream is left empty and usable and the error returned.
  Status settle_restore(lanes::StreamId stream, Slot* s, Status st, int64_t rows);
  // What the window's row i needs of its logits (RowDraw), under the stream's sampling.
  RowDraw row_draw(const lanes::Window& w, size_t i, const Slot& s) const;

  std::unique_ptr<StreamForward> fwd_;
  bool reduce_rows_ = true;
  std::unique_ptr<ThreadPool> draw_pool_;  // null: draws on the calling thread
  std::vector<PieceResult> results_;             // the last step's results, reused
  std::vector<std::span<const float>> rows_;     // their whole rows
  lanes::BackendInfo info_;
  int64_t bytes_per_row_ = 0, bytes_fixed_ = 0;
  std::map<lanes::StreamId, Slot> slots_;
};

}  // namespace dsv4::engine
