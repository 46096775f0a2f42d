// What one forward call shares across layers: the rows of every piece, their streams and
// positions, and the transient per-row slots the reference "publishes" (top-k list, candidates).
// With bounded replay (docs/replay.md) a layer runs on a row space of the call: a context of its own
// rows, sharing the call's published slots.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/pre_round.h"
#include "backends/cpu/stream_state.h"
#include "family/deepseek_v41/layer_plan.h"
#include "family/deepseek_v41/model.h"
#include "core/thread_pool.h"

namespace dsv4::cpu {

struct PieceCtx {
  StreamState* state = nullptr;
  int64_t start = 0;  // absolute position of the piece's first row
  int64_t T = 0;      // rows
  int64_t row0 = 0;   // first row in the call's batch
};

// The slots index sources and the candidate source publish for the following layers, per call row.
struct Published {
  std::vector<std::vector<int32_t>> topk;
  std::vector<std::vector<uint8_t>> cand;
};

struct CallCtx {
  const family::Model* M = nullptr;
  const family::ModelPlan* cfg = nullptr;
  const std::vector<family::LayerPlan>* roles = nullptr;
  const StateGeometry* geo = nullptr;
  ThreadPool* pool = nullptr;
  const std::vector<float>* freqs_plain = nullptr;  // base rope_theta, no YaRN (ratio 0)
  const std::vector<float>* freqs_yarn = nullptr;   // compress_rope_theta with YaRN (ratio > 0)
  // Reproduce the reference's call-shape-dependent behaviour (forward.h OracleOptions).
  bool reference_shapes = false;
  // The rows this context covers: the whole call, or a row space of it (engine/row_space.h) whose pieces are
  // suffixes of the call's (start and T from the first kept row, row0 within the space).
  std::vector<PieceCtx> pieces;
  int64_t rows = 0;
  std::vector<int64_t> pos;       // [rows] absolute position
  std::vector<int> piece_of;      // [rows]
  std::vector<int64_t> call_row;  // [rows] the row's call row (the published slots are kept per call row)
  std::vector<uint8_t> image;     // [rows] image-span token flags
  Published* pub = nullptr;       // the call's published slots
  // Tests (`dsv4 run --dump-pre-round`): set while a tapped layer runs; its attention hands this its values before
  // their bf16 roundings (pre_round.h). Null: no tap.
  const PreRoundSink* pre_round = nullptr;
};

}  // namespace dsv4::cpu
