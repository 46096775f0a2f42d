// The oracle's view of a model: sizes and per-layer roles as plain data (filled from the family
// config at load, or directly by tests), validated before any weight is touched.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/kv_rows.h"
#include "core/status.h"

namespace dsv4::cpu {

enum class Variant : uint8_t { v41, v4 };

struct ModelConfig {
  Variant variant = Variant::v41;
  int64_t vocab = 129280, dim = 5120;
  int n_layers = 40;
  int n_heads = 64, head_dim = 512, rope_dim = 64;
  int q_lora = 1280, o_lora = 1024, o_groups = 8;
  int window = 128;
  float norm_eps = 1e-20f;
  int weight_block = 32, act_block = 32;
  // MoE
  int n_experts = 384, n_active = 6, moe_inter = 2304;
  float route_scale = 1.5f, swiglu_limit = 10.0f;
  // CSA2
  std::vector<int> compress_ratios;  // [n_layers] (DSpark stages are ratio 0)
  std::vector<int> kv_source_layers, index_source_layers;
  int candidate_source_layer = -1;
  int candidate_topk_blocks = 2048, candidate_block_size = 8;
  int index_heads = 32, index_head_dim = 128, index_topk = 512;
  // mHC
  int hc_mult = 4, hc_sinkhorn_iters = 20;
  float hc_eps = 1e-6f;
  // RoPE
  double rope_theta = 10000, compress_rope_theta = 160000, rope_factor = 16;
  double beta_fast = 32, beta_slow = 1;
  int64_t original_seq_len = 65536;
  // Engram
  std::vector<int> engram_layers;
  int engram_max_ngram = 4, engram_heads = 8, engram_head_dim = 256;
  int64_t engram_vocab_size = 16000000, engram_compressed_vocab = 99092;
  int32_t engram_pad_id = 2;
  // DSpark
  int dspark_stages = 3, dspark_block = 5;
  int32_t dspark_noise_token = 128799;
  std::vector<int> dspark_target_layers;
  int dspark_markov_rank = 256, dspark_experts = 128, dspark_active = 3;
  // V4 / 0731 (model-spec.md §8): hash-routed layers [0, num_hash_layers) via tid2eid; the
  // router normalises without +1e-20; the shared expert's SwiGLU clamp (the released V4-Flash
  // reference passes swiglu_limit to it, docs/cpu-oracle.md).
  int num_hash_layers = 0;
  float router_eps = 1e-20f;
  bool shared_clamp = true;
  // Storage of the compressed main KV: FP4 (reference) or FP8 (option); V4: FP8 NoPE + bf16 RoPE.
  RowFormat compressed_format = RowFormat::fp4_e4m3_16;
  // Window rows: FP8 over all dims per 32 (V4.1) or FP8 NoPE per 64 + bf16 RoPE (V4).
  RowFormat window_format = RowFormat::fp8_ue8m0_32;
  RowFormat index_format = RowFormat::fp4_ue8m0_32;

  bool v4() const { return variant == Variant::v4; }

  int hc_mixes() const { return hc_mult * (hc_mult + 2); }
  Status validate() const;
};

// What one backbone layer does, derived from the config (model-spec.md §2.3).
struct LayerRole {
  int ratio = 0;
  bool kv_source = false;      // owns a compressor and index keys (V4: every ratio > 0 layer)
  bool overlap = false;        // V4 ratio 4: overlapped 2x-wide compressor with an own indexer
  bool index_source = false;   // owns an indexer query side
  bool candidate_source = false;
  bool uses_candidates = false;  // index source after the candidate source
  int kv_from = -1;            // layer whose compressed KV / index keys this layer reads
  int index_from = -1;         // layer whose top-k list this layer uses
  bool engram = false;
  int engram_index = -1;       // position in engram_layers
  int tap_index = -1;          // position in dspark_target_layers
  bool hash_routed = false;    // V4: experts from tid2eid
};

// The V4 variant's defaults for the fields above (formats, router, quantization blocks).
void apply_v4_numerics(ModelConfig& c);
// Test-only: every quantization step off (activations, KV rows, index keys/queries), the mode
// Hugging Face transformers' DeepSeek-V4 port computes (tests/hf/README.md).
ModelConfig without_quantization(ModelConfig c);

std::vector<LayerRole> layer_roles(const ModelConfig& c);

}  // namespace dsv4::cpu
