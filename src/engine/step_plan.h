// The plan of one forward step, built once from its pieces and read by every backend: each piece's place in the
// call (stream, first position, rows, first call row), every row's token, position and piece, the call rows
// whose logits are asked for, what kind of work the step mixes (prompt pieces, decode rows, verify windows),
// and with bounded replay the rows each decoder layer computes (docs/replay.md). Building it checks the pieces
// before any state is touched.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/status.h"
#include "engine/row_space.h"
#include "engine/stream_forward.h"
#include "family/deepseek_v41/replay.h"

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

  // Rows per layer. Every row of the call (`all`) below bounded_from; from it on (bounded replay), layer l's
  // input is read at in_rows(l) (l - 1's output; every row at bounded_from) and its output computed at
  // out_rows(l) (layer_out[l - bounded_from]), out_rows(l) within in_rows(l). bounded_from = -1: every layer
  // on every row. `taps`: the rows whose DSpark ring keys the call writes (each piece's last ring rows).
  RowSpace all;
  int32_t bounded_from = -1;
  std::vector<RowSpace> layer_out;
  RowSpace taps;
  const RowSpace& out_rows(int layer) const {
    return bounded_from < 0 || layer < bounded_from ? all : layer_out[layer - bounded_from];
  }
  const RowSpace& in_rows(int layer) const {
    return bounded_from < 0 || layer <= bounded_from ? all : layer_out[layer - 1 - bounded_from];
  }
  // Layer `layer` computes its output at fewer rows than it reads its input (its rows shrink there).
  bool shrinks(int layer) const { return out_rows(layer).rows < in_rows(layer).rows; }
  // Some layer computes fewer rows than the call holds.
  bool bounded() const { return bounded_from >= 0 && !layer_out.empty() && layer_out.back().rows < all.rows; }
};

struct StepLimits {
  int64_t vocab = 0;
  int64_t max_context = 0;    // positions a stream may hold (0: unbounded)
  int64_t max_call_rows = 0;  // rows one step may carry (0: unbounded)
  // Bounded replay (docs/replay.md): the model's cone shape, or null for every layer on every row. Its taps
  // also restrict StepPlan::taps to each piece's last ring rows.
  const family::ReplayShape* replay = nullptr;
  int64_t dim = 0;            // width of given embedding rows (0: the forward takes none)
};

// The plan of `pieces`; `length` gives a stream's current length (not_found for an unknown stream). Refuses,
// naming the problem: an unknown stream, a stream twice, a token outside the vocabulary, a logit row outside
// its piece, a stream past max_context, a step past max_call_rows, given embedding rows a forward without `dim` is
// sent, that leave their piece, overlap, or hold other than count x dim values. With limits.replay, each piece's
// rows per bounded layer are its cone (family::cone_first_rows): prompt pieces shrink toward their logit rows and
// the rows their rings keep; decode rows and verify windows keep every row.
StatusOr<StepPlan> plan_step(const std::vector<Piece>& pieces, const std::function<StatusOr<int64_t>(int32_t)>& length,
                             const StepLimits& limits);

}  // namespace dsv4::engine
