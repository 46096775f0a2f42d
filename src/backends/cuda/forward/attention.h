// CSA2 attention of one backbone layer on the device (model-spec.md §3.6, §3.12): the semantics of
// cpu::attention_layer<float> (same rounding points, float accumulation, summation order fixed per
// row), including the compressor, index keys, the lightning indexer with candidates and top-k, and
// publishing for later layers. Each output row's arithmetic is independent of the other rows of the
// call, so pieces == whole, a k-row verify == k single steps and batched == alone hold bit for bit.
#pragma once

#include "backends/cuda/forward/call.h"
#include "core/status.h"
#include "engine/step_plan.h"

namespace dsv4::cuda {

// Once per call, after c.cfg/roles/attn, stream, scratch, rows, pos and pieces are set: checks the
// pieces (each starts at its stream's length, rows in order, within max_context), allocates the
// published slots (c.topk, c.cand) and the per-call device tables from c.scratch.
Status begin_attention_call(CallCtx& c);

// Bounded replay (docs/replay.md): after begin_attention_call, stages every backbone layer's rows of `plan`
// (its input and output row spaces, the output rows' places among the input rows and among the rows the
// layer's top-k and candidates were published at) into c.layer_rows. Nothing when no layer of the plan
// computes fewer rows than the call holds (then every layer runs on every row, as without it).
Status begin_bounded_call(CallCtx& c, const engine::StepPlan& plan);
// Metadata bytes begin_bounded_call may stage for a call of `rows` rows in `pieces` pieces (upper bound).
size_t bounded_meta_bytes(const family::ModelPlan& cfg, int64_t rows, int64_t pieces);

// y bf16 [rows, D] = attention of backbone layer `layer` on x bf16 [rows, D] (device, float holding
// bf16 values). Writes the layer's caches of every piece's stream (window ring; compressed and
// index-key rows and projection rings on KV sources) and, on index sources, c.topk / c.cand.
// With c.layer_rows (bounded replay) x holds the layer's input rows and y receives its output rows:
// the window keys and the ring writes are of the input rows, the rest of the output rows.
// Temporaries come from c.scratch and are released before it returns.
Status attention_layer(CallCtx& c, int layer, const float* x, float* y);

// Scratch bytes attention_layer may take for a call of `rows` rows whose largest position is
// max_pos (the forward sizes its arena with this plus its own needs).
int64_t attention_scratch_bytes(const family::ModelPlan& cfg, int64_t rows, int64_t max_pos);

}  // namespace dsv4::cuda
