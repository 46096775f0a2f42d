// The oracle's weights, decoded to exact float values at load (FP8/FP4 keep their block scales so
// the linears follow §3.1 block by block).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cpu/engram.h"
#include "backends/cpu/linear.h"
#include "backends/cpu/mhc.h"
#include "backends/cpu/model_config.h"

namespace dsv4::cpu {

struct AttentionWeights {
  Fp8Weight wq_a, wq_b, wkv, wo_b;  // [Q, D], [H*d, Q], [d, D], [D, G*O]
  Bf16Weight wo_a;                  // bf16 [G*O, H*d/G], dequantized from FP8 at load
  std::vector<float> q_norm, kv_norm;  // bf16 [Q], [d]
  std::vector<float> sink;             // f32 [H]
  // KV source only: compressor (ratio 2: f32 wkv/wgate; ratio 1: bf16 wkv) and index keys.
  Bf16Weight comp_wkv, comp_wgate;  // [d, D]
  std::vector<float> comp_norm;     // bf16 [d]
  Bf16Weight idx_wk;                // bf16 [ihd, d]
  std::vector<float> idx_k_norm;    // bf16 [ihd]
  // Index source only: the query side.
  Fp8Weight idx_wq_b;               // [IH*ihd, Q]
  Bf16Weight idx_weights_proj;      // bf16 [IH, D]
  // V4: the compressor's position bias f32 [ratio, w] (w = 2d with overlap, else d; comp_wkv /
  // comp_wgate are [w, D]); the indexer's own overlapped compressor over index_head_dim.
  std::vector<float> comp_ape;
  Bf16Weight idx_comp_wkv, idx_comp_wgate;  // [2*ihd, D]
  std::vector<float> idx_comp_ape;          // f32 [ratio, 2*ihd]
  std::vector<float> idx_comp_norm;         // bf16 [ihd]
};

struct ExpertWeights { Fp4Weight w1, w2, w3; };       // [I, D], [D, I], [I, D]
struct SharedExpertWeights { Fp8Weight w1, w2, w3; };

struct MoeWeights {
  Bf16Weight gate;                      // bf16 [E, D]
  std::vector<float> bias, bias_vl;     // f32 [E]
  std::vector<ExpertWeights> experts;   // [E]
  SharedExpertWeights shared;
  int n_active = 6;
  std::vector<int32_t> tid2eid;         // V4 hash-routed layers: [V, n_active] expert ids
};

struct HcHeadWeights {                  // V4 final collapse (model-spec.md §8 mHC)
  F32Weight fn;                         // f32 [C, C*D]
  std::vector<float> base;              // f32 [C]
  float scale = 1.0f;                   // f32 [1]
};

struct BlockWeights {
  AttentionWeights attn;
  MoeWeights ffn;
  std::vector<float> attn_norm, ffn_norm;  // bf16 [D]
  HcParams hc_attn, hc_ffn;
  std::unique_ptr<EngramWeights> engram;   // layers listed in engram_layers only
};

struct DsparkWeights {
  std::vector<BlockWeights> stages;     // mtp.0 .. mtp.(S-1)
  Fp8Weight main_proj;                  // [D, n_taps*D]
  std::vector<float> main_norm;         // bf16 [D]
  std::vector<float> norm;              // bf16 [D] (last stage's head norm)
  std::vector<bf16_t> markov_embed;     // bf16 [V, R]
  F32Weight markov_head;                // [V, R]
  F32Weight confidence;                 // [1, D + R]
};

struct ModelWeights {
  ModelConfig config;
  std::vector<bf16_t> embed;            // bf16 [V, D]
  std::vector<BlockWeights> layers;     // [n_layers]
  std::vector<float> norm;              // bf16 [D]
  F32Weight head;                       // [V, D]
  std::unique_ptr<DsparkWeights> dspark;  // absent: no drafter
  std::unique_ptr<HcHeadWeights> hc_head; // V4 only
  std::vector<int32_t> engram_token_map;  // raw id -> compressed id [V]
};

}  // namespace dsv4::cpu
