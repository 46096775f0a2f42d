// The layer plan: every layer's roles as data (model-spec.md §2.3 for V4.1, §8 for V4), built from Config.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/kv_rows.h"
#include "core/status.h"
#include "family/deepseek_v41/config.h"

namespace dsv4::family {

// What a layer's attention does beyond its sliding window.
enum class AttnKind : uint8_t {
  window_only,  // compress_ratio 0: sliding window only (V4.1 layers 0, 1; V4 layers 0, 1; DSpark stages)
  full,         // V4.1 KV + index source: own compressor, own index keys, own top-k (2, 8, 14, 20)
  reindex,      // V4.1 index source without KV: own index query over the KV source's keys,
                //   restricted to the candidate source's blocks (24, 28, 32, 36)
  reuse,        // V4.1: newest KV source's compressed KV + newest index source's top-k
  v4_csa,       // V4 ratio 4: own overlapped compressor + own indexer (with its own compressor, Hadamard)
  v4_hca,       // V4 other ratios (128): own plain compressor, attends to every visible compressed row
};

std::string_view attn_kind_name(AttnKind k);  // "window", "full", "reindex", "reuse", "csa", "hca"

// One layer (backbone or DSpark stage). Layer ids of sources refer to backbone layers; -1 = none.
struct LayerPlan {
  int32_t id = 0;                 // 0..L-1 backbone, L + s for DSpark stage s
  bool is_dspark = false;
  int32_t dspark_stage = -1;      // 0.. for DSpark stages
  int32_t compress_ratio = 0;
  AttnKind attn = AttnKind::window_only;

  // Compressed-KV side.
  bool kv_source = false;         // owns a compressor writing compressed-KV rows (V4: every ratio>0 layer)
  bool compressor_gate = false;   // compressor has wgate (V4.1 ratio >= 2; V4 always)
  bool compressor_fp32 = false;   // compressor projections in fp32 (V4.1 ratio >= 2; V4 always)
  bool compressor_overlap = false;// V4 ratio 4: 2x-wide wkv/wgate pooling 2 groups, with ape
  bool compressor_ape = false;    // the pooled groups add a learned per-slot position embedding (V4)
  int32_t kv_from = -1;           // layer whose compressed-KV rows this layer attends to (self if source)

  // Index side.
  bool index_source = false;      // runs an indexer query and publishes its own top-k
  bool owns_index_keys = false;   // computes/stores index-key rows (V4.1: KV+index source; V4: csa)
  bool candidate_source = false;  // publishes candidate blocks (V4.1 layer 20)
  bool uses_candidates = false;   // masks its scores by candidate_from's candidates (reindex)
  int32_t index_keys_from = -1;   // layer whose index keys the scores read (self if owner)
  int32_t topk_from = -1;         // layer whose top-k list selects this layer's compressed rows
  int32_t candidate_from = -1;

  // Everything else.
  bool engram = false;            // Engram applied to the stream before this layer's block
  int32_t engram_index = -1;      // position in engram_layer_ids
  bool dspark_tap = false;        // the stream entering this layer feeds the DSpark main_proj
  int32_t dspark_tap_index = -1;  // position in dspark_target_layer_ids
  bool hash_routed = false;       // V4 layers [0, num_hash_layers): experts from tid2eid
  int32_t n_routed_experts = 0;
  int32_t num_experts_per_tok = 0;
  double rope_base = 0;           // rope_theta (ratio 0) or compress_rope_theta (ratio > 0)
  bool yarn = false;              // YaRN frequency scaling (ratio > 0 only)

  std::string name() const;       // "layers.7" or "mtp.1": the tensor-name prefix
};

// How the mHC pre-mixes pair with the collapses (model-spec.md §3.5, §8).
enum class HcPremix : uint8_t {
  carried,  // V4.1: a sub-layer collapses with the pre-mix the previous one computed (the attention with the
            //   last FFN's, the FFN with its attention's); the head's collapse with the last FFN's
  own,      // V4: every collapse with its own sub-layer's pre-mix; the head's with hc_head's
};

// The model description every backend executes: sizes, the numerics the variants differ in (as behaviours,
// never as a variant test), the cache row formats and every layer's roles. Built from a validated config by
// build_plan; tests may change a copy (without_quantization).
struct ModelPlan {
  Variant variant = Variant::v41;  // for names and messages: backends branch on the fields below

  // Sizes (config.h names in brackets where they differ).
  int64_t vocab = 0, dim = 0;                    // [vocab_size, hidden_size]
  int n_layers = 0;                              // [num_hidden_layers]
  int n_heads = 0, head_dim = 0, rope_dim = 0;   // [num_attention_heads, head_dim, qk_rope_head_dim]
  int q_lora = 0, o_lora = 0, o_groups = 0;      // [q_lora_rank, o_lora_rank, o_groups]
  int window = 0;                                // [sliding_window]
  float norm_eps = 0;                            // [rms_norm_eps]
  int weight_block = 32;                         // FP8 weight scale tile side [quantization_config]
  int act_block = 32;                            // FP8 activation block; 0: activations not quantized (tests)
  int n_experts = 0, n_active = 0, moe_inter = 0;  // [n_routed_experts, num_experts_per_tok, moe_intermediate_size]
  float route_scale = 0, swiglu_limit = 0;       // [routed_scaling_factor, swiglu_limit]
  std::vector<int> compress_ratios;              // backbone layers only
  int candidate_topk_blocks = 0, candidate_block_size = 0;
  int index_heads = 0, index_head_dim = 0, index_topk = 0;  // [index_n_heads, ...]
  int hc_mult = 0, hc_sinkhorn_iters = 0;
  float hc_eps = 0;
  double rope_theta = 0, compress_rope_theta = 0, rope_factor = 0;  // rope_factor: rope_scaling.factor
  double beta_fast = 0, beta_slow = 0;
  int64_t original_seq_len = 0;                  // rope_scaling.original_max_position_embeddings
  std::vector<int> engram_layers;                // [engram_layer_ids]
  int engram_max_ngram = 0, engram_heads = 0, engram_head_dim = 0;
  int64_t engram_vocab_size = 0;
  int32_t engram_pad_id = 0;                     // [engram_pad_token_id]
  int dspark_block = 0;                          // [dspark_block_size]
  int32_t dspark_noise_token = 0;                // [dspark_noise_token_id]
  int dspark_markov_rank = 0, dspark_experts = 0, dspark_active = 0;

  // The drafter: stages the forward runs (0 where its forward is not confirmed by reference code: V4-0731,
  // model-spec.md §10.7; `dspark` below still lists the checkpoint's stages) and the layers it taps.
  int dspark_stages = 0;
  std::vector<int> dspark_target_layers;

  // Numerics (model-spec.md §8 lists where the variants differ).
  HcPremix premix = HcPremix::carried;
  bool q_head_norm = false;        // a bf16 RMS norm of every query head before RoPE
  bool index_hadamard = false;     // the indexer rotates its queries and keys by a Hadamard transform
  bool topk_by_score = false;      // the indexer's top-k in descending score order (else ascending rows)
  bool route_norm_always = false;  // the routed weights are normalized also when one expert is active
  float router_eps = 1e-20f;       // added to the routed weights' sum before normalizing
  bool shared_clamp = true;        // the shared expert's SwiGLU clamps at swiglu_limit too
  int num_hash_layers = 0;         // layers [0, n) route by tid2eid
  // Reference call shapes only (OracleOptions::reference_shapes): a one-row decode lists its window with
  // the empty ring slots first (V4.1's reference; V4's pads at the end).
  bool reference_window_pads_first = false;

  // Cache row formats (core/kv_rows.h): window rows, compressed KV rows, index-key rows.
  KvRowFormat window_format = KvRowFormat::fp8_ue8m0_32;
  KvRowFormat compressed_format = KvRowFormat::fp4_e4m3_16;
  KvRowFormat index_format = KvRowFormat::fp4_ue8m0_32;

  std::vector<LayerPlan> layers;  // backbone, index = layer id
  std::vector<LayerPlan> dspark;  // DSpark stages, index = stage
  // Backbone layers that own compressed-KV caches / index-key caches, ascending.
  std::vector<int32_t> kv_cache_layers;
  std::vector<int32_t> index_key_layers;

  const LayerPlan& layer(int32_t id) const {
    const int32_t n = static_cast<int32_t>(layers.size());
    return id < n ? layers[id] : dspark[id - n];
  }
  int hc_mixes() const { return hc_mult * (hc_mult + 2); }
};

// Builds the plan from a validated config (call validate_config first; parse_config does).
ModelPlan build_plan(const Config& c);

// The numerics and row formats of `variant` (model-spec.md §8), set on `m`; build_plan calls it, and tests that
// assemble a plan by hand.
void set_variant_numerics(ModelPlan& m, Variant variant);

// Whether the backends can execute `p`: shapes their kernels and row formats support; names the first
// that is not (a config can be valid for the family and still out of the backends' reach).
Status check_plan(const ModelPlan& p);

// Test-only: every quantization step off (activations, KV rows, index keys and queries), the mode Hugging
// Face transformers' DeepSeek-V4 port computes (tests/hf/README.md).
ModelPlan without_quantization(ModelPlan p);

// A human-readable table, one line per layer (used by `dsv4 inspect`).
std::string format_plan(const ModelPlan& plan);

}  // namespace dsv4::family
