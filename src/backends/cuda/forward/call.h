// What one CUDA forward call shares across layers: the model's attention weights and roles, the
// call's rows (pieces of streams at their positions), scratch, and the slots that index sources
// "publish" for later layers (top-k rows, candidate masks). The forward fills it per call, then
// calls begin_attention_call once before layer 0 (attention.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cuda/kernels/attention/attention_kernels.cuh"
#include "backends/cuda/runtime/side_stream.h"
#include "family/deepseek_v41/layer_plan.h"

namespace dsv4::cuda {

class Arena;                // arena.h
class CallMeta;             // call_meta.h
struct ModelDevice;         // model.h (the whole model on the device)
struct AttentionDevice;     // attention_weights.h (one layer's attention weights)
struct AttentionCallTables; // attention.cc (per-call device tables built by begin_attention_call)
struct V4CallTables;        // attention_v4.cc (the V4 variant's per-call tables)
class StreamCaches;         // attention_state.h
class Collective;           // collective.h

// One piece of the call: T rows of one stream starting at absolute position `start`, occupying
// rows [row0, row0 + T) of the call's batch. start must equal the stream's cached length.
struct DevicePiece {
  StreamCaches* caches = nullptr;
  int64_t start = 0, T = 0, row0 = 0;
};

// One row space of the call on the device (engine/row_space.h): its rows' positions and pieces.
struct RowsDev {
  int64_t rows = 0;
  const int64_t* pos = nullptr;        // device [rows]
  const int32_t* row_piece = nullptr;  // device [rows]
};

// Bounded replay (docs/replay.md): the rows of one layer. Its window keys (and a KV source's compressor) are
// computed at the input rows, its query side and everything after at the output rows, a suffix of the input
// rows piece by piece. Staged by begin_bounded_call; the layer's piece table describes the input rows.
struct LayerRowsDev {
  RowsDev in, out;
  const PieceDev* pieces = nullptr;  // device [n_pieces]: start, T, row0 of each piece's input rows; caches
  const int64_t* keep = nullptr;     // device [out.rows]: each output row's input row (null: the same rows)
  const int64_t* topk_at = nullptr;  // device [out.rows]: its row among the published top-k's (null: its own)
  const int32_t* cand_at = nullptr;  // device [out.rows]: its row among the published candidates' (null: own)
};

struct CallCtx {
  // Model (filled by the forward): cudafwd's model, and what attention reads of it.
  const ModelDevice* model = nullptr;
  const family::ModelPlan* cfg = nullptr;
  const std::vector<family::LayerPlan>* roles = nullptr;  // [n_layers]
  const AttentionDevice* attn = nullptr;               // [n_layers] per-layer attention weights

  cudaStream_t stream = nullptr;
  // When set (the forward's, as OpCtx::side): where a layer runs its window key and compressors beside
  // its query path (attention.cc, attention_v4.cc).
  SideStream side;
  Arena* scratch = nullptr;  // per-call scratch; reset by the forward after the call
  // Tensor-parallel rank (tp_forward.h): this rank's heads and output groups; the groups' wo_a outputs are
  // gathered from every rank before the whole wo_b. Null on one GPU.
  Collective* collective = nullptr;

  int64_t rows = 0;
  const int64_t* pos = nullptr;     // device [rows] absolute positions (= piece.start + i)
  // When set, the per-call device tables are staged there (uploaded by the forward before the
  // call's launches) instead of taken from scratch and copied at once.
  CallMeta* meta = nullptr;
  // When > 0 (>= every pos + 1): the index scores' stride and grid cover positions below this bound
  // instead of the call's largest position, so a call's launch sizes repeat over many steps (graph
  // keys); rows still score only their own (pos + 1) / ratio entries.
  int64_t pos_bound = 0;
  // Graph calls: the call tables' layout is a function of `rows` alone (the graph key) — the per-layer piece tables
  // at a stride of `rows` entries, every emit list padded to `rows` entries with skipped ones — so calls of any
  // piece count and any groups completed replay one graph.
  bool fixed_layout = false;
  std::vector<DevicePiece> pieces;  // host copy of the call's pieces, rows in order

  // Published by index sources / the candidate source for the following layers (allocated from
  // `scratch` by begin_attention_call, so they live for the whole call):
  int32_t* topk = nullptr;   // device [rows, cfg->index_topk]: selected compressed rows, ascending,
                             // -1 after the row's min(index_topk, L_c) entries
  uint8_t* cand = nullptr;   // device [rows, cand_stride]: candidate mask of the row's L_c rows
  int64_t cand_stride = 0;
  std::shared_ptr<AttentionCallTables> tables;  // set by begin_attention_call
  std::shared_ptr<V4CallTables> v4_tables;      // V4 configs: set by begin_attention_call too
  // Bounded replay: every backbone layer's rows (begin_bounded_call); empty: every layer on every row. The
  // published slots then hold, for each index / candidate source, its output rows (rows [0, out.rows)).
  std::vector<LayerRowsDev> layer_rows;
  std::shared_ptr<const std::vector<uint8_t>> layer_rows_staging;  // their host image (kept until uploaded)
};

}  // namespace dsv4::cuda
