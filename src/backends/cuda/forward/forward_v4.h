// V4 / 0731 host glue of the forward outside attention (model-spec.md §8): the head's final
// collapse with hc_head's own pre-mix, and the extra scratch V4 attention takes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "backends/cuda/forward/call.h"
#include "backends/cuda/forward/forward_block.h"
#include "backends/cuda/model/model.h"
#include "core/status.h"

namespace dsv4::cuda {

// logits f32 [n, V] = head(RMSNorm(collapse(h, hc_head_pre(h)); norm)) of rows index[0..n)
// (device int64); h bf16 [rows, C, D] (cpu::head_logits with hc).
Status head_logits_v4(OpCtx& c, const ModelDevice& M, const float* h, const int64_t* index, int64_t n, float* logits);

// Once per call (from begin_attention_call, after its checks): the V4 attention tables of every
// layer (V4CallTables, attention_v4.cc) staged in c.meta when set (else taken from c.scratch and
// copied at once), into c.v4_tables.
Status begin_attention_call_v4(CallCtx& c);

// Bytes of CallMeta those tables take for a call of `rows` rows in `pieces` pieces (upper bound).
size_t attention_v4_meta_bytes(const family::ModelPlan& cfg, int64_t rows, int64_t pieces);

// y bf16 [rows, D] = V4 attention of backbone layer `layer` on x bf16 [rows, D] (attention_layer's
// contract; dispatched from it when the config is V4).
Status attention_layer_v4(CallCtx& c, int layer, const float* x, float* y);

// Bench aid (`dsv4 bench`'s per-op split; not thread-safe): while `times` is set, each eager
// attention_layer_v4 brackets its launches with events and adds their device milliseconds to
// (*times)["ratio R: op"] when it returns (waiting for its launches). Null turns it off.
void set_v4_attention_timing(std::map<std::string, double>* times);

// Scratch bytes attention_layer_v4 takes beyond attention_scratch_bytes' V4.1 estimate.
int64_t attention_v4_extra_scratch_bytes(const family::ModelPlan& cfg, int64_t rows, int64_t max_pos);

}  // namespace dsv4::cuda
