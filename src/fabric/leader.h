// Rank 0's backend: the lane host's calls become plans that every rank runs on its own backend.
//
// LeaderBackend wraps rank 0's local backend. A call that needs an answer (open, prefill, verify, draft,
// snapshot, restore) is sent as a plan (with the keeps and releases queued since the last plan), run
// locally, then every follower's reply is read. The combined status is the first failure in rank order,
// named "rank R: ..." — so a refusal on any rank ends that request on every rank, and serving continues.
// Results must agree: a verify or draft whose digest differs on any rank, or a queued keep that fails on
// a follower only, ends every rank with kExitDiverged. A lost rank ends every rank (control.h).
#pragma once

#include <cstdint>
#include <vector>

#include "fabric/control.h"
#include "fabric/plan.h"
#include "lanes/backend.h"

namespace dsv4::fabric {

struct FabricCounters {
  uint64_t plans = 0;         // plans run
  uint64_t ops = 0;           // ops in them
  uint64_t trace_digest = 0;  // rolling digest of every plan's bytes (equal on every rank)
};

// Folds one plan's bytes into the trace digest.
void count_plan(FabricCounters& counters, std::span<const uint8_t> plan_bytes, size_t ops);

class LeaderBackend final : public lanes::Backend {
 public:
  // `control` is rank 0's; `local` is rank 0's own backend. Both must outlive this.
  LeaderBackend(Control& control, lanes::Backend& local);

  // The local backend's facts, except that snapshots are fabric snapshots: their version and the model id
  // name the world size, so a prompt cache never hands one world's bytes to another.
  const lanes::BackendInfo& info() const override { return info_; }
  int64_t stream_bytes(int64_t rows) const override { return local_.stream_bytes(rows); }
  Status open(lanes::StreamId stream, const lanes::StreamSpec& spec) override;
  Status prefill(std::span<const lanes::Piece> pieces) override;
  Status verify(std::span<const lanes::Window> windows, std::vector<std::vector<lanes::RowResult>>* out) override;
  Status keep(lanes::StreamId stream, int64_t rows) override;
  Status draft(std::span<const lanes::DraftRequest> requests, std::vector<lanes::DraftProposal>* out) override;
  StatusOr<std::vector<uint8_t>> snapshot(lanes::StreamId stream) override;
  Status restore(lanes::StreamId stream, std::span<const uint8_t> bytes, int64_t rows) override;
  void release(lanes::StreamId stream) override;

  // The clean stop: sends queued ops, then stop {plans, ops}; every follower must answer with the same
  // counters and trace digest (else every rank ends with kExitDiverged). Call after the lane host stopped.
  Status stop();
  const FabricCounters& counters() const { return counters_; }

 private:
  struct Run {
    Status status;                     // the combined status of the last op
    std::vector<Outcome> followers;    // [world-1] outcomes of the last op, ranks 1..
  };
  // Sends queued ops + `op`, runs `op` locally (queued ops ran locally when queued), reads every reply.
  StatusOr<Run> run(Op op, std::vector<std::vector<lanes::RowResult>>* rows,
                    std::vector<lanes::DraftProposal>* proposals, std::vector<uint8_t>* snapshot_bytes);

  Control& control_;
  lanes::Backend& local_;
  lanes::BackendInfo info_;
  std::vector<Op> queued_;  // keeps and releases not yet sent
  FabricCounters counters_;
};

}  // namespace dsv4::fabric
