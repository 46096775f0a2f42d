// The oracle's ModelConfig from the family's typed config (declared in load.h); apart from the
// loader so that binaries building configs from presets link no tokenizer.
#include "backends/cpu/load.h"

namespace dsv4::cpu {

ModelConfig model_config_from(const family::Config& c) {
  ModelConfig m;
  m.variant = c.variant == family::Variant::v41 ? Variant::v41 : Variant::v4;
  m.vocab = c.vocab_size;
  m.dim = c.hidden_size;
  m.n_layers = c.num_hidden_layers;
  m.n_heads = c.num_attention_heads;
  m.head_dim = c.head_dim;
  m.rope_dim = c.qk_rope_head_dim;
  m.q_lora = c.q_lora_rank;
  m.o_lora = c.o_lora_rank;
  m.o_groups = c.o_groups;
  m.window = c.sliding_window;
  m.norm_eps = static_cast<float>(c.rms_norm_eps);
  m.weight_block = c.quant.weight_block_in;
  m.act_block = c.act_block();
  m.n_experts = c.n_routed_experts;
  m.n_active = c.num_experts_per_tok;
  m.moe_inter = c.moe_intermediate_size;
  m.route_scale = static_cast<float>(c.routed_scaling_factor);
  m.swiglu_limit = static_cast<float>(c.swiglu_limit);
  m.compress_ratios.assign(c.compress_ratios.begin(), c.compress_ratios.begin() + c.num_hidden_layers);
  m.kv_source_layers.assign(c.kv_source_layer_ids.begin(), c.kv_source_layer_ids.end());
  m.index_source_layers.assign(c.index_source_layer_ids.begin(), c.index_source_layer_ids.end());
  m.candidate_source_layer = c.candidate_source_layer_id;
  m.candidate_topk_blocks = c.candidate_topk_blocks;
  m.candidate_block_size = c.candidate_block_size;
  m.index_heads = c.index_n_heads;
  m.index_head_dim = c.index_head_dim;
  m.index_topk = c.index_topk;
  m.hc_mult = c.hc_mult;
  m.hc_sinkhorn_iters = c.hc_sinkhorn_iters;
  m.hc_eps = static_cast<float>(c.hc_eps);
  m.rope_theta = c.rope_theta;
  m.compress_rope_theta = c.compress_rope_theta;
  m.rope_factor = c.rope_scaling.factor;
  m.beta_fast = c.rope_scaling.beta_fast;
  m.beta_slow = c.rope_scaling.beta_slow;
  m.original_seq_len = c.rope_scaling.original_max_position_embeddings;
  m.engram_layers.assign(c.engram_layer_ids.begin(), c.engram_layer_ids.end());
  m.engram_max_ngram = c.engram_max_ngram_size;
  m.engram_heads = c.engram_n_heads;
  m.engram_head_dim = c.engram_head_dim;
  m.engram_vocab_size = c.engram_vocab_size;
  m.engram_compressed_vocab = c.engram_compressed_vocab_size;
  m.engram_pad_id = static_cast<int32_t>(c.engram_pad_token_id);
  m.dspark_stages = c.num_dspark_stages();
  m.dspark_block = c.dspark_block_size;
  m.dspark_noise_token = static_cast<int32_t>(c.dspark_noise_token_id);
  m.dspark_target_layers.assign(c.dspark_target_layer_ids.begin(), c.dspark_target_layer_ids.end());
  m.dspark_markov_rank = c.dspark_markov_rank;
  m.dspark_experts = c.dspark_n_routed_experts;
  m.dspark_active = c.dspark_num_experts_per_tok;
  if (c.variant == family::Variant::v4) {
    apply_v4_numerics(m);
    m.num_hash_layers = c.num_hash_layers;
    // The 0731 drafter's forward is not confirmed by reference code (model-spec.md §10.7): the
    // oracle runs V4 without it (its mtp.* tensors are checked, not loaded).
    m.dspark_stages = 0;
    m.dspark_target_layers.clear();
  }
  return m;
}

}  // namespace dsv4::cpu
