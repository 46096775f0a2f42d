// V4 / 0731 host glue of the forward outside attention (model-spec.md §8): the head's final
// collapse with hc_head's own pre-mix, and the extra scratch V4 attention takes.
#pragma once

#include <cstdint>

#include "backends/cuda/call.h"
#include "backends/cuda/forward_block.h"
#include "backends/cuda/model.h"
#include "core/status.h"

namespace dsv4::cuda {

// logits f32 [n, V] = head(RMSNorm(collapse(h, hc_head_pre(h)); norm)) of rows index[0..n)
// (device int64); h bf16 [rows, C, D] (cpu::head_logits with hc).
Status head_logits_v4(OpCtx& c, const ModelDevice& M, const float* h, const int64_t* index, int64_t n, float* logits);

// y bf16 [rows, D] = V4 attention of backbone layer `layer` on x bf16 [rows, D] (attention_layer's
// contract; dispatched from it when the config is V4).
Status attention_layer_v4(CallCtx& c, int layer, const float* x, float* y);

// Scratch bytes attention_layer_v4 takes beyond attention_scratch_bytes' V4.1 estimate.
int64_t attention_v4_extra_scratch_bytes(const cpu::ModelConfig& cfg, int64_t rows, int64_t max_pos);

}  // namespace dsv4::cuda
