// Upload of one layer's attention weights (see attention_weights.h).
#include "backends/cuda/model/attention_weights.h"

#include <string>

#include "family/deepseek_v41/rope.h"
#include "backends/cuda/model/upload.h"

namespace dsv4::cuda {

StatusOr<AttentionDevice> upload_attention(const family::LayerWeights& w, const family::ModelPlan& cfg, int layer,
                                           Uploader& up) {
  if (layer < 0 || layer >= static_cast<int>(cfg.layers.size() + cfg.dspark.size()))
    return error(StatusCode::invalid_argument, "upload_attention: layer {} out of range", layer);
  const family::LayerPlan& role = cfg.layer(layer);
  const std::string n = role.name() + ".attn.";
  AttentionDevice a;
  DSV4_ASSIGN_OR_RETURN(a.wq_a, upload(w.wq_a, up, n + "wq_a"));
  DSV4_ASSIGN_OR_RETURN(a.wq_b, upload(w.wq_b, up, n + "wq_b"));
  DSV4_ASSIGN_OR_RETURN(a.wkv, upload(w.wkv, up, n + "wkv"));
  DSV4_ASSIGN_OR_RETURN(a.wo_b, upload(w.wo_b, up, n + "wo_b"));
  DSV4_ASSIGN_OR_RETURN(a.wo_a, upload_dequant_bf16(w.wo_a, up, n + "wo_a"));
  DSV4_ASSIGN_OR_RETURN(a.q_norm, upload_floats(w.q_norm, up, n + "q_norm"));
  DSV4_ASSIGN_OR_RETURN(a.kv_norm, upload_floats(w.kv_norm, up, n + "kv_norm"));
  DSV4_ASSIGN_OR_RETURN(a.sink, upload_floats(w.attn_sink, up, n + "attn_sink"));
  // RoPE: ratio-0 layers use rope_theta without YaRN, compressed layers compress_rope_theta with it.
  const std::vector<float> freqs = family::rope_frequencies(family::rope_params(cfg, role.yarn));
  DSV4_ASSIGN_OR_RETURN(a.freqs, up.floats(freqs, n + "rope frequencies"));
  if (role.kv_source && role.compressor_ape) {
    // fp32 linears over bf16-stored weights (half the bytes, widened exactly by the kernels); an EXL3 pack's
    // linears through the fp32 views, unrounded.
    auto either = [&](const family::Matrix& wt, const std::string& name, Bf16View& v16, F32View& v32) -> Status {
      if (wt.exl3 || wt.weight.dtype == DType::bf16) {
        DSV4_ASSIGN_OR_RETURN(v16, upload_bf16(wt, up, name));
      } else {
        DSV4_ASSIGN_OR_RETURN(v32, upload_f32(wt, up, name));
      }
      return ok_status();
    };
    DSV4_RETURN_IF_ERROR(either(w.compressor_wkv, n + "compressor.wkv", a.comp_wkv, a.comp_wkv32));
    DSV4_RETURN_IF_ERROR(either(w.compressor_wgate, n + "compressor.wgate", a.comp_wgate, a.comp_wgate32));
    DSV4_ASSIGN_OR_RETURN(a.comp_ape, upload_floats(w.compressor_ape, up, n + "compressor.ape"));
    DSV4_ASSIGN_OR_RETURN(a.comp_norm, upload_floats(w.compressor_norm, up, n + "compressor.norm"));
    if (role.compressor_overlap) {
      DSV4_RETURN_IF_ERROR(either(w.indexer_compressor_wkv, n + "indexer.compressor.wkv", a.idx_comp_wkv, a.idx_comp_wkv32));
      DSV4_RETURN_IF_ERROR(
          either(w.indexer_compressor_wgate, n + "indexer.compressor.wgate", a.idx_comp_wgate, a.idx_comp_wgate32));
      DSV4_ASSIGN_OR_RETURN(a.idx_comp_ape, upload_floats(w.indexer_compressor_ape, up, n + "indexer.compressor.ape"));
      DSV4_ASSIGN_OR_RETURN(a.idx_comp_norm, upload_floats(w.indexer_compressor_norm, up, n + "indexer.compressor.norm"));
    }
  } else if (role.kv_source) {
    DSV4_ASSIGN_OR_RETURN(a.comp_wkv, upload_bf16(w.compressor_wkv, up, n + "compressor.wkv"));
    if (role.compress_ratio > 1) {
      DSV4_ASSIGN_OR_RETURN(a.comp_wgate, upload_bf16(w.compressor_wgate, up, n + "compressor.wgate"));
      // An EXL3 pack: the fp32 views (unset bf16 pointers select them) carry the linears, unrounded.
      if (a.comp_wkv.exl3) a.comp_wkv32 = F32View{nullptr, a.comp_wkv.out, a.comp_wkv.in, a.comp_wkv.exl3};
      if (a.comp_wgate.exl3) a.comp_wgate32 = F32View{nullptr, a.comp_wgate.out, a.comp_wgate.in, a.comp_wgate.exl3};
    }
    DSV4_ASSIGN_OR_RETURN(a.comp_norm, upload_floats(w.compressor_norm, up, n + "compressor.norm"));
    DSV4_ASSIGN_OR_RETURN(a.idx_wk, upload_bf16(w.indexer_wk, up, n + "indexer.wk"));
    DSV4_ASSIGN_OR_RETURN(a.idx_k_norm, upload_floats(w.indexer_k_norm, up, n + "indexer.k_norm"));
  }
  if (role.index_source) {
    DSV4_ASSIGN_OR_RETURN(a.idx_wq_b, upload(w.indexer_wq_b, up, n + "indexer.wq_b"));
    DSV4_ASSIGN_OR_RETURN(a.idx_weights_proj, upload_bf16(w.indexer_weights_proj, up, n + "indexer.weights_proj"));
  }
  return a;
}

}  // namespace dsv4::cuda
