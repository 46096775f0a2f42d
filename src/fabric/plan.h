// The plan rank 0 sends each round: the lane core's backend calls as data, and each rank's outcome.
//
// Rank 0's lane host decides everything (admission, pieces, windows, keeps, drafts, seeds); the fabric
// records each Backend call as an Op. A Plan is the ops since the last plan up to and including one call
// whose answer rank 0 needs before it continues (open, prefill, verify, draft, snapshot, restore); keep
// and release ride along with the next plan. Every rank executes a plan's ops in order on its own backend,
// so every backend sees the same call sequence, and answers with one Outcome per op.
#pragma once

#include <cstdint>
#include <span>
#include <variant>
#include <vector>

#include "core/status.h"
#include "lanes/backend.h"

namespace dsv4::fabric {

struct OpenOp {
  lanes::StreamId stream = 0;
  lanes::StreamSpec spec;
};
struct PieceOp {  // an owned lanes::Piece
  lanes::StreamId stream = 0;
  int64_t start = 0;
  std::vector<lanes::TokenId> tokens;
};
struct PrefillOp {
  std::vector<PieceOp> pieces;
};
struct VerifyOp {
  std::vector<lanes::Window> windows;
};
struct KeepOp {
  lanes::StreamId stream = 0;
  int64_t rows = 0;
};
struct DraftOp {
  std::vector<lanes::DraftRequest> requests;
};
struct SnapshotOp {
  lanes::StreamId stream = 0;
};
struct RestoreOp {  // bytes: the fabric snapshot (every rank's part, see fabric_snapshot)
  lanes::StreamId stream = 0;
  std::vector<uint8_t> bytes;
  int64_t rows = 0;
};
struct ReleaseOp {
  lanes::StreamId stream = 0;
};

using Op = std::variant<OpenOp, PrefillOp, VerifyOp, KeepOp, DraftOp, SnapshotOp, RestoreOp, ReleaseOp>;

const char* op_name(const Op& op);

struct Plan {
  uint64_t sequence = 0;  // 1, 2, ... per fabric; a follower refuses a gap
  std::vector<Op> ops;
};

// One rank's outcome of one op.
struct Outcome {
  StatusCode code = StatusCode::ok;
  std::string message;        // the rank's error, when code != ok
  uint64_t digest = 0;        // verify: digest of every RowResult; draft: of every proposal; else 0
  std::vector<uint8_t> bytes; // snapshot: this rank's snapshot bytes
};

struct Reply {
  uint64_t sequence = 0;
  std::vector<Outcome> outcomes;  // one per op, in order (an op after a failed one still runs)
};

std::vector<uint8_t> encode_plan(const Plan& plan);
StatusOr<Plan> decode_plan(std::span<const uint8_t> bytes);
std::vector<uint8_t> encode_reply(const Reply& reply);
StatusOr<Reply> decode_reply(std::span<const uint8_t> bytes);

// Digests that say whether two ranks produced the same results, bit for bit.
uint64_t digest_rows(const std::vector<std::vector<lanes::RowResult>>& rows);
uint64_t digest_proposals(const std::vector<lanes::DraftProposal>& proposals);

// Runs one op on rank `rank`'s backend (what every rank does with each op; a restore takes the rank's part
// of the fabric snapshot). `out_rows` / `out_proposals` (may be null) receive verify and draft results.
Outcome execute_op(lanes::Backend& backend, const Op& op, int32_t rank, int32_t world,
                   std::vector<std::vector<lanes::RowResult>>* out_rows,
                   std::vector<lanes::DraftProposal>* out_proposals);

// A prompt-cache snapshot of a fabric: every rank's own bytes, in rank order (a tensor-parallel rank holds
// only its slice of a stream's state).
std::vector<uint8_t> fabric_snapshot(const std::vector<std::vector<uint8_t>>& per_rank);
StatusOr<std::vector<uint8_t>> fabric_snapshot_part(std::span<const uint8_t> bytes, int32_t rank, int32_t world);

}  // namespace dsv4::fabric
