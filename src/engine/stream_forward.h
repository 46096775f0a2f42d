// The forward every backend implements (the CPU oracle, CUDA): streams fed in pieces at their current length
// (several streams per call: prompt pieces, decode rows and verify windows in one step), fp32 logits of the
// rows asked for, rollback, snapshots in the family's layout and DSpark drafts. Plain data in and out; the lane
// adapter (lane_backend.h) serves the lane core from any of them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "family/deepseek_v41/layer_plan.h"
#include "family/deepseek_v41/state_geometry.h"
#include "lanes/backend.h"
#include "lanes/partition_sum.h"
#include "lanes/truncated_candidates.h"

namespace dsv4::engine {

// Rows of a piece fed as given embedding rows (an image's span): offset and count within the piece, bf16 values
// [count, D] valid for the call, and whether they are image positions (MoE bias_vl, Engram DEAD).
using EmbedRows = lanes::EmbedRows;

// What the caller needs of one logits row: the row itself, or a reduction a forward may compute where the logits are
// (the device) so that only a few values come back. Reductions are exact by construction: the caller decides the
// token from them with the host sampler's own arithmetic (lanes/gumbel_candidates.h, lanes/truncated_candidates.h,
// docs/server.md).
struct RowDraw {
  enum class Kind : uint8_t {
    whole,      // the row's logits
    argmax,     // the first id of largest logit, NaN read as -inf: sample_keyed's greedy draw
    gumbel,     // the Gumbel candidates of lanes::gumbel_candidates at (temperature, key), at most
                // lanes::kMaxGumbelCandidates of them; a row with a non-finite logit or more candidates comes whole
    truncated,  // the candidates of lanes::truncated_candidates at (cut, key), at most lanes::kMaxGumbelCandidates
                // of them; an irregular or uncertain row, or one with more candidates, comes whole
  };
  Kind kind = Kind::whole;
  double temperature = 1.0;  // gumbel: lanes::keyed_temperature of the stream's sampling
  uint64_t key = 0;          // gumbel, truncated: lanes::row_key(seed, position drawn)
  lanes::TruncationCut cut;  // truncated: lanes::truncation_cut of the stream's sampling (its temperature too)
  // Logprobs of a reduced row (any kind but whole): its largest logit and partition sum (lanes/partition_sum.h), its
  // top_n best ids (<= 20) and the logit of `proposed` (an id, or -1), from which the caller derives the row's
  // logprobs exactly (lanes::partition_from, logprob_of, top_logprobs_among).
  bool partition = false;
  int32_t top_n = 0;
  int32_t proposed = -1;
  // A token mask over the row's vocabulary (argmax, gumbel, truncated; nonempty, of the vocabulary's size; valid for
  // the call): the token is draw_row's under it (lanes/token_mask.h); the logprobs stay those of the raw row.
  const lanes::TokenMask* mask = nullptr;
};

// A logits row as a forward returned it.
struct RowPick {
  bool whole = true;            // the row is among the piece's whole rows (asked whole, a forward that does not
                                // reduce, or a reduction that came back whole)
  int32_t token = -1;           // argmax: the id
  std::vector<int32_t> ids;     // gumbel, truncated: the candidates, ascending
  std::vector<float> logits;    // gumbel, truncated: their logits; argmax: the token's logit (or empty)
  float top_logit = 0.0f;       // partition: the logit of the first id of largest logit (NaN read as -inf), raw
  lanes::PartitionSum sum;      // partition: lanes::partition_sum(row, logit_value(top_logit)) when that is finite
  std::vector<int32_t> top_ids;   // top_n: the best ids, best first
  std::vector<float> top_logits;  // their logits
  float proposed_logit = 0.0f;    // proposed (inside the vocabulary): its logit
};

// Tokens appended to one stream at its current length.
struct Piece {
  int32_t stream = 0;
  std::vector<int32_t> tokens;
  // Rows (indices into tokens) whose logits are wanted; logits of row i predict token i+1.
  std::vector<int32_t> logit_rows;
  // Rows whose input is a given embedding instead of their token's (sorted, disjoint, inside the piece). A backend
  // uses the values in place of the embedding lookup; the token still names the row (the image token).
  std::vector<EmbedRows> embeds;
  // Empty (every row whole) or one per logit row: what is wanted of it (forwards that do not reduce rows return every
  // row whole and leave PieceResult::picks empty).
  std::vector<RowDraw> draws;
};

struct PieceResult {
  std::vector<float> logits;   // fp32 [whole rows, vocab]: the logit rows that came whole, in order (every logit row
                               // when picks is empty)
  std::vector<RowPick> picks;  // empty, or one per logit row (Piece::draws asked): how each came back
};

struct DraftResult {
  std::vector<int32_t> tokens;     // drafts for positions p+2 .. p+1+block
  std::vector<float> probs;        // softmax probability of each draft under its row's logits
  std::vector<float> confidence;   // raw confidence-head logit per row
  std::vector<float> logits;       // fp32 [block, vocab] (Markov-biased)
};

// One stream's draft in a batch: the stream and `next`, the token drawn for position length(stream).
struct DraftAsk {
  int32_t stream = 0;
  int32_t next = 0;
};

// A split snapshot (family::StateGeometry): the bounded part and each row table's rows from a position on.
struct StateParts {
  std::vector<uint8_t> bounded;
  std::vector<std::vector<uint8_t>> rows;  // [table] rows for positions [from, length)
};

class StreamForward {
 public:
  virtual ~StreamForward() = default;
  virtual const family::ModelPlan& config() const = 0;
  virtual bool has_drafter() const = 0;
  virtual uint32_t snapshot_version() const = 0;  // format of snapshot bytes; differs per backend
  // Width of the given embedding rows forward() takes (Piece::embeds; the hidden size); 0: it takes none.
  virtual int64_t embed_dim() const { return 0; }
  // Device memory of the streams when the forward holds them in a fixed pool (the CUDA KV pool): the bytes a stream
  // holding `rows` positions takes from it (its pages; the slab it also takes is one of max_streams) and the pool's
  // bytes of pages. -1 and 0: no fixed pool (the lane adapter then estimates from the geometry).
  virtual int64_t pooled_stream_bytes(int64_t rows) const {
    (void)rows;
    return -1;
  }
  virtual int64_t pool_budget_bytes() const { return 0; }
  virtual StatusOr<int32_t> open_stream() = 0;
  virtual Status close_stream(int32_t stream) = 0;
  virtual StatusOr<int64_t> length(int32_t stream) const = 0;
  // One step over every piece (each stream at most once; see step_plan.h for what is refused).
  virtual StatusOr<std::vector<PieceResult>> forward(const std::vector<Piece>& pieces) = 0;
  // forward() for a caller that reads the whole rows before its next call on this forward (the lane adapter): piece
  // i's whole rows are (*rows)[i], fp32 [whole rows, vocab]; a forward may leave PieceResult::logits empty and point
  // them into its own buffer (valid until its next call), saving the copy. Default: forward(), each piece's rows
  // viewing its logits in *out.
  virtual Status forward_viewed(const std::vector<Piece>& pieces, std::vector<PieceResult>* out,
                                std::vector<std::span<const float>>* rows) {
    DSV4_ASSIGN_OR_RETURN(*out, forward(pieces));
    rows->clear();
    for (const PieceResult& r : *out) rows->emplace_back(r.logits);
    return ok_status();
  }
  virtual Status truncate(int32_t stream, int64_t length) = 0;
  virtual StatusOr<std::vector<uint8_t>> snapshot(int32_t stream) const = 0;
  virtual Status restore(int32_t stream, const std::vector<uint8_t>& bytes) = 0;
  virtual StatusOr<DraftResult> draft(int32_t stream, int32_t next) = 0;
  // The drafts of several streams (each at most once) at once: result i for asks[i], bit for bit what
  // draft(asks[i].stream, asks[i].next) gives whichever streams share the call; DraftResult::logits only when
  // `logits` (else empty). A forward that can batch them does (the CUDA forward: one pass of launches over every
  // stream's rows, one synchronization); the default drafts one stream at a time (the CPU oracle).
  virtual StatusOr<std::vector<DraftResult>> draft_batch(std::span<const DraftAsk> asks, bool logits) {
    std::vector<DraftResult> out;
    for (const DraftAsk& a : asks) {
      StatusOr<DraftResult> r = draft(a.stream, a.next);
      if (!r.ok()) return r.status();
      out.push_back(std::move(r).value());
      if (!logits) out.back().logits = {};
    }
    return out;
  }
  // Split snapshots (optional; lanes::Backend::snapshot_parts): the forward's append-only row tables in a fixed order
  // (empty = whole snapshots only, and the two calls below are never made), the bounded part with each table's rows
  // from position `from`, and a state rebuilt from a bounded part and each table's rows [0, n) as chunks.
  virtual std::vector<family::RowTableShape> row_tables() const { return {}; }
  virtual StatusOr<StateParts> snapshot_parts(int32_t stream, int64_t from) const {
    (void)stream, (void)from;
    return error(StatusCode::unimplemented, "this forward keeps whole snapshots only");
  }
  virtual Status restore_parts(int32_t stream, std::span<const uint8_t> bounded,
                               std::span<const std::vector<std::span<const uint8_t>>> tables) {
    (void)stream, (void)bounded, (void)tables;
    return error(StatusCode::unimplemented, "this forward keeps whole snapshots only");
  }
};

}  // namespace dsv4::engine
