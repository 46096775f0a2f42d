// One backbone layer's attention weights on the device (views into an Arena) and their upload from the
// model's stored tensors.
#pragma once

#include <cstdint>

#include "family/deepseek_v41/layer_plan.h"
#include "backends/cuda/model/upload.h"
#include "backends/cuda/model/weights.h"
#include "core/status.h"
#include "family/deepseek_v41/weights.h"

namespace dsv4::cuda {

struct AttentionDevice {
  Fp8View wq_a, wq_b, wkv, wo_b;  // [Q, D], [H*d, Q], [d, D], [D, G*O]
  Bf16View wo_a;                  // [G*O, H*d/G] (block-diagonal groups)
  const float* q_norm = nullptr;  // bf16 [Q]
  const float* kv_norm = nullptr; // bf16 [d]
  const float* sink = nullptr;    // f32 [H]
  const float* freqs = nullptr;   // f32 [rope_dim/2]: this layer's RoPE frequencies (plain or YaRN)
  // KV source: compressor and index keys. Ratio 2: fp32 linears over wkv/wgate, read as bf16
  // (comp_wkv / comp_wgate, widened exactly: half the bytes; upload_attention fills these) or, when
  // those are unset, as fp32 (comp_wkv32 / comp_wgate32). Ratio 1: bf16 linear over comp_wkv.
  F32View comp_wkv32, comp_wgate32;
  Bf16View comp_wkv, comp_wgate;
  const float* comp_norm = nullptr;   // bf16 [d]
  Bf16View idx_wk;                    // [ihd, d]
  const float* idx_k_norm = nullptr;  // bf16 [ihd]
  // Index source: the query side.
  Fp8View idx_wq_b;           // [IH*ihd, Q]
  Bf16View idx_weights_proj;  // [IH, D]
  // V4 (model-spec.md §8): comp_wkv / comp_wgate (or the *32 views) are [w, D] with w = 2d at
  // ratio 4 (overlap), else d; position bias f32 [ratio, w]; ratio 4 also the indexer's overlapped
  // compressor ([2*ihd, D] bf16-stored fp32 linears or their *32 views, bias f32 [ratio, 2*ihd],
  // norm bf16 [ihd]). No idx_wk / idx_k_norm.
  const float* comp_ape = nullptr;
  Bf16View idx_comp_wkv, idx_comp_wgate;
  F32View idx_comp_wkv32, idx_comp_wgate32;
  const float* idx_comp_ape = nullptr;
  const float* idx_comp_norm = nullptr;
};

// Uploads layer `layer`'s attention weights (a backbone layer, or a DSpark stage at n_layers + stage; its role in
// the plan decides which exist).
StatusOr<AttentionDevice> upload_attention(const family::LayerWeights& w, const family::ModelPlan& cfg, int layer,
                                           Uploader& up);

}  // namespace dsv4::cuda
