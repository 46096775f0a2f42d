// The small configs of the oracle's own tests (declared in synthetic.h): vocabulary 512, every layer role.
#include "family/deepseek_v41/synthetic_weights.h"

namespace dsv4::family {
namespace {

// The sizes both small configs share with the release where they do not set their own.
Config common() {
  Config c;
  c.vocab_size = 512;
  c.hidden_size = 128;
  c.num_attention_heads = 4;
  c.o_groups = 2;
  c.sliding_window = 8;
  c.rms_norm_eps = 1e-20;
  c.rope_theta = 10000;
  c.compress_rope_theta = 160000;
  c.routed_scaling_factor = 1.5;
  c.swiglu_limit = 10.0;
  c.n_routed_experts = 8;
  c.num_experts_per_tok = 2;
  c.index_n_heads = 4;
  c.index_topk = 4;
  c.hc_mult = 4;
  c.hc_sinkhorn_iters = 20;
  c.hc_eps = 1e-6;
  c.max_position_embeddings = 1 << 20;
  return c;
}

}  // namespace

Config small_test_config() {
  Config c = common();
  c.variant = Variant::v41;
  c.model_type = "deepseek_v41";
  c.num_hidden_layers = 8;
  c.head_dim = 64;
  c.qk_rope_head_dim = 16;
  c.q_lora_rank = 64;
  c.o_lora_rank = 32;
  c.moe_intermediate_size = 64;
  c.compress_ratios = {0, 0, 2, 2, 1, 1, 1, 1, 0, 0, 0};  // then the 3 DSpark stages
  c.kv_source_layer_ids = {2, 4};
  c.index_source_layer_ids = {2, 4, 6};
  c.candidate_source_layer_id = 4;
  c.candidate_topk_blocks = 3;
  c.candidate_block_size = 2;
  c.index_head_dim = 32;
  c.engram_layer_ids = {1, 3};
  c.engram_max_ngram_size = 4;
  c.engram_n_heads = 2;
  c.engram_head_dim = 32;
  c.engram_vocab_size = 50;
  c.engram_compressed_vocab_size = 300;
  c.engram_pad_token_id = 2;
  c.dspark_block_size = 5;
  c.dspark_noise_token_id = 500;
  c.dspark_target_layer_ids = {5, 6, 7};
  c.dspark_markov_rank = 32;
  c.dspark_n_routed_experts = 4;
  c.dspark_num_experts_per_tok = 2;
  c.num_nextn_predict_layers = 3;
  c.quant.weight_block_out = c.quant.weight_block_in = 32;
  const EngramLayout lay = compute_engram_layout(c);
  for (const auto& l : lay.layers) c.engram_num_embeddings.push_back(l.rows);
  return c;
}

Config small_v4_test_config() {
  Config c = common();
  c.variant = Variant::v4;
  c.model_type = "deepseek_v4";
  c.num_hidden_layers = 6;
  c.head_dim = 128;
  c.qk_rope_head_dim = 64;
  c.q_lora_rank = 128;
  c.o_lora_rank = 64;
  c.rms_norm_eps = 1e-6;
  c.moe_intermediate_size = 128;
  c.num_hash_layers = 2;
  c.compress_ratios = {0, 4, 128, 4, 128, 4};
  c.index_head_dim = 64;
  c.quant.weight_block_out = c.quant.weight_block_in = 128;
  return c;
}

}  // namespace dsv4::family
