// Weight binding: a validated checkpoint's tensors as typed views per layer, for the backends.
#pragma once

#include <string>
#include <vector>

#include "core/checkpoint.h"
#include "core/status.h"
#include "core/tensor_view.h"
#include "family/deepseek_v41/config.h"
#include "family/deepseek_v41/layer_plan.h"
#include "family/deepseek_v41/tensors.h"

namespace dsv4::family {

// An absent optional tensor has data == nullptr (check with present()).
inline bool present(const TensorView& v) { return v.data != nullptr; }

// FP8 linear: weight e4m3 [out, in] + scale UE8M0 [ceil(out/b), ceil(in/b)] (b = act_block()).
struct Fp8Linear {
  TensorView weight, scale;
};
// FP4 routed-expert linear: weight I8 [out, in/2] (even k in the low nibble) + scale UE8M0 [out, in/32].
struct Fp4Linear {
  TensorView weight, scale;
};
struct Expert {
  Fp4Linear w1, w2, w3;  // gate [I, D], down [D, I], up [I, D]
};

// One block (backbone layer or DSpark stage); which members are present follows its LayerPlan.
struct LayerWeights {
  // mHC (F32): fn [(2+hc)*hc, hc*D], base [(2+hc)*hc], scale [3].
  TensorView hc_attn_fn, hc_attn_base, hc_attn_scale, hc_ffn_fn, hc_ffn_base, hc_ffn_scale;
  TensorView attn_norm, ffn_norm;  // bf16 [D]
  // Attention.
  TensorView attn_sink;            // f32 [H]
  TensorView q_norm, kv_norm;      // bf16 [Q], [d]
  Fp8Linear wq_a, wq_b, wkv, wo_a, wo_b;
  // Compressor (KV sources; V4: every ratio>0 layer).
  TensorView compressor_wkv, compressor_wgate, compressor_norm, compressor_ape;
  // Indexer: query side (index sources), key side (index-key owners), V4's own compressor.
  Fp8Linear indexer_wq_b;
  TensorView indexer_weights_proj, indexer_wk, indexer_k_norm;
  TensorView indexer_compressor_wkv, indexer_compressor_wgate, indexer_compressor_norm, indexer_compressor_ape;
  // MoE.
  TensorView gate_weight;          // bf16 [E, D]
  TensorView gate_bias, gate_bias_vl;  // f32 [E] (absent on V4 hash layers; bias_vl V4.1 only)
  TensorView tid2eid;              // i64 [vocab, k] (V4 hash layers)
  std::vector<Expert> experts;     // [E]
  Fp8Linear shared_w1, shared_w2, shared_w3;
  // Engram (V4.1 Engram layers).
  TensorView engram_table, engram_table_scale;  // e4m3 [rows, hd], ue8m0 [rows, hd/32]
  TensorView engram_q_weight, engram_k_weight;  // bf16 [hc, D]
  Fp8Linear engram_wkv;                         // [(hc+1)*D, orders*heads*hd]
  // DSpark stage extras: main_proj/main_norm on stage 0; the heads on the last stage.
  Fp8Linear main_proj;
  TensorView main_norm, final_norm, markov_embed, markov_head, confidence_proj;
  TensorView hc_head_fn, hc_head_base, hc_head_scale;  // V4 last stage
};

struct ModelWeights {
  TensorView embed;                 // bf16 [vocab, D]
  TensorView head;                  // bf16 [vocab, D]
  TensorView norm;                  // bf16 [D]
  TensorView hc_head_fn, hc_head_base, hc_head_scale;  // V4 only
  TensorView image_start, image_end, image_newline;    // V4.1 with vision
  std::vector<LayerWeights> layers;  // backbone, by layer id
  std::vector<LayerWeights> dspark;  // by stage
};

// A checkpoint directory opened, validated against its config and bound.
struct Model {
  std::string path;
  Config config;
  ModelPlan plan;
  TensorTable table;
  Checkpoint checkpoint;  // owns the mappings the views point into
  ModelWeights weights;
};

// Lists every missing, extra, mis-typed or mis-shaped tensor of `ck` against `table` in one error.
Status validate_checkpoint(const Checkpoint& ck, const TensorTable& table);

// Binds every tensor of a validated checkpoint (views into ck's mappings).
StatusOr<ModelWeights> bind_weights(const Config& c, const ModelPlan& plan, const Checkpoint& ck);

// load_config + Checkpoint::open + validate_checkpoint + bind_weights.
StatusOr<Model> open_model(const std::string& dir);

}  // namespace dsv4::family
