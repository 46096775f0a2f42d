// The plan of one forward step, built once from its pieces and read by every backend: each piece's place in the
// call (stream, first position, rows, first call row), every row's token, position and piece, the call rows
// whose logits are asked for, and what kind of work the step mixes (prompt pieces, decode rows, verify windows).
// Building it checks the pieces before any state is touched.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/status.h"
#include "engine/stream_forward.h"

namespace dsv4::engine {

enum class PieceKind : uint8_t {
  prompt,  // rows of a prompt (logits of its last row at most)
  decode,  // one row, its logits asked for
  verify,  // a window of several rows, every row's logits asked for (a draft or forced tokens checked)
};

struct PiecePlan {
  int32_t stream = 0;
  int64_t start = 0;   // the stream's length before the step: the piece's first position
  int64_t rows = 0;    // tokens appended
  int64_t row0 = 0;    // first call row
  int64_t logit0 = 0;  // first of its logit rows among the call's
  PieceKind kind = PieceKind::prompt;
};

// A call row fed a given embedding: its row in the call and its values, bf16 [D] (the piece's EmbedRows).
struct GivenRow {
  int64_t row = 0;
  const uint16_t* values = nullptr;
};

struct StepPlan {
  std::vector<PiecePlan> pieces;
  std::vector<int32_t> ids;        // [rows] tokens
  std::vector<int64_t> pos;        // [rows] positions
  std::vector<int32_t> piece_of;   // [rows] piece index
  std::vector<int64_t> logit_index;  // call rows whose logits are returned, piece by piece
  std::vector<GivenRow> given;     // rows fed given embeddings, ascending (empty: every row embeds its token)
  std::vector<uint8_t> image;      // [rows] 1 = an image position (MoE bias_vl, Engram DEAD); empty when none is
  int64_t rows() const { return static_cast<int64_t>(ids.size()); }
  int64_t logit_rows() const { return static_cast<int64_t>(logit_index.size()); }
  int64_t count(PieceKind k) const;
};

struct StepLimits {
  int64_t vocab = 0;
  int64_t max_context = 0;    // positions a stream may hold (0: unbounded)
  int64_t max_call_rows = 0;  // rows one step may carry (0: unbounded)
  int64_t dim = 0;            // width of given embedding rows (0: the forward takes none)
};

// The plan of `pieces`; `length` gives a stream's current length (not_found for an unknown stream). Refuses,
// naming the problem: an unknown stream, a stream twice, a token outside the vocabulary, a logit row outside
// its piece, a stream past max_context, a step past max_call_rows, given embedding rows a forward without `dim` is
// sent, that leave their piece, overlap, or hold other than count x dim values.
StatusOr<StepPlan> plan_step(const std::vector<Piece>& pieces, const std::function<StatusOr<int64_t>(int32_t)>& length,
                             const StepLimits& limits);

}  // namespace dsv4::engine
