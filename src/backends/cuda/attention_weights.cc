// Upload of one layer's attention weights (see attention_weights.h).
#include "backends/cuda/attention_weights.h"

#include <string>

#include "backends/cpu/rope.h"
#include "backends/cuda/upload.h"

namespace dsv4::cuda {

StatusOr<AttentionDevice> upload_attention(const cpu::AttentionWeights& w, const cpu::ModelConfig& cfg, int layer,
                                           Arena& arena) {
  const auto roles = cpu::layer_roles(cfg);
  if (layer < 0 || layer >= static_cast<int>(roles.size()))
    return error(StatusCode::invalid_argument, "upload_attention: layer {} out of range", layer);
  const cpu::LayerRole& role = roles[layer];
  const std::string n = "layers." + std::to_string(layer) + ".attn.";
  AttentionDevice a;
  DSV4_ASSIGN_OR_RETURN(a.wq_a, upload(w.wq_a, arena, n + "wq_a"));
  DSV4_ASSIGN_OR_RETURN(a.wq_b, upload(w.wq_b, arena, n + "wq_b"));
  DSV4_ASSIGN_OR_RETURN(a.wkv, upload(w.wkv, arena, n + "wkv"));
  DSV4_ASSIGN_OR_RETURN(a.wo_b, upload(w.wo_b, arena, n + "wo_b"));
  DSV4_ASSIGN_OR_RETURN(a.wo_a, upload_bf16(w.wo_a, arena, n + "wo_a"));
  DSV4_ASSIGN_OR_RETURN(a.q_norm, upload(std::span<const float>(w.q_norm), arena, n + "q_norm"));
  DSV4_ASSIGN_OR_RETURN(a.kv_norm, upload(std::span<const float>(w.kv_norm), arena, n + "kv_norm"));
  DSV4_ASSIGN_OR_RETURN(a.sink, upload(std::span<const float>(w.sink), arena, n + "attn_sink"));
  // RoPE: ratio-0 layers use rope_theta without YaRN, compressed layers compress_rope_theta with it.
  const cpu::RopeParams rp = role.ratio > 0
      ? cpu::RopeParams{cfg.rope_dim, cfg.compress_rope_theta, cfg.original_seq_len, cfg.rope_factor, cfg.beta_fast, cfg.beta_slow}
      : cpu::RopeParams{cfg.rope_dim, cfg.rope_theta, 0, cfg.rope_factor, cfg.beta_fast, cfg.beta_slow};
  const std::vector<float> freqs = cpu::rope_frequencies(rp);
  DSV4_ASSIGN_OR_RETURN(a.freqs, upload(std::span<const float>(freqs), arena, n + "rope frequencies"));
  if (role.kv_source && cfg.v4()) {
    // fp32 linears: bf16-stored when every value is a bf16 value (half the bytes), else fp32.
    auto either = [&](const cpu::Bf16Weight& wt, const std::string& name, Bf16View& v16, F32View& v32) -> Status {
      auto b = upload_bf16(wt, arena, name);
      if (b.ok()) {
        v16 = *b;
        return ok_status();
      }
      if (b.status().code() != StatusCode::invalid_argument) return b.status();
      DSV4_ASSIGN_OR_RETURN(v32, upload_f32(wt, arena, name));
      return ok_status();
    };
    DSV4_RETURN_IF_ERROR(either(w.comp_wkv, n + "compressor.wkv", a.comp_wkv, a.comp_wkv32));
    DSV4_RETURN_IF_ERROR(either(w.comp_wgate, n + "compressor.wgate", a.comp_wgate, a.comp_wgate32));
    DSV4_ASSIGN_OR_RETURN(a.comp_ape, upload(std::span<const float>(w.comp_ape), arena, n + "compressor.ape"));
    DSV4_ASSIGN_OR_RETURN(a.comp_norm, upload(std::span<const float>(w.comp_norm), arena, n + "compressor.norm"));
    if (role.overlap) {
      DSV4_RETURN_IF_ERROR(either(w.idx_comp_wkv, n + "indexer.compressor.wkv", a.idx_comp_wkv, a.idx_comp_wkv32));
      DSV4_RETURN_IF_ERROR(either(w.idx_comp_wgate, n + "indexer.compressor.wgate", a.idx_comp_wgate, a.idx_comp_wgate32));
      DSV4_ASSIGN_OR_RETURN(a.idx_comp_ape, upload(std::span<const float>(w.idx_comp_ape), arena, n + "indexer.compressor.ape"));
      DSV4_ASSIGN_OR_RETURN(a.idx_comp_norm,
                            upload(std::span<const float>(w.idx_comp_norm), arena, n + "indexer.compressor.norm"));
    }
  } else if (role.kv_source) {
    DSV4_ASSIGN_OR_RETURN(a.comp_wkv, upload_bf16(w.comp_wkv, arena, n + "compressor.wkv"));
    if (role.ratio > 1) {
      DSV4_ASSIGN_OR_RETURN(a.comp_wgate, upload_bf16(w.comp_wgate, arena, n + "compressor.wgate"));
      // An EXL3 pack: the fp32 views (unset bf16 pointers select them) carry the linears, unrounded.
      if (a.comp_wkv.exl3) a.comp_wkv32 = F32View{nullptr, a.comp_wkv.out, a.comp_wkv.in, a.comp_wkv.exl3};
      if (a.comp_wgate.exl3) a.comp_wgate32 = F32View{nullptr, a.comp_wgate.out, a.comp_wgate.in, a.comp_wgate.exl3};
    }
    DSV4_ASSIGN_OR_RETURN(a.comp_norm, upload(std::span<const float>(w.comp_norm), arena, n + "compressor.norm"));
    DSV4_ASSIGN_OR_RETURN(a.idx_wk, upload_bf16(w.idx_wk, arena, n + "indexer.wk"));
    DSV4_ASSIGN_OR_RETURN(a.idx_k_norm, upload(std::span<const float>(w.idx_k_norm), arena, n + "indexer.k_norm"));
  }
  if (role.index_source) {
    DSV4_ASSIGN_OR_RETURN(a.idx_wq_b, upload(w.idx_wq_b, arena, n + "indexer.wq_b"));
    DSV4_ASSIGN_OR_RETURN(a.idx_weights_proj, upload_bf16(w.idx_weights_proj, arena, n + "indexer.weights_proj"));
  }
  return a;
}

}  // namespace dsv4::cuda
