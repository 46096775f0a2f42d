// CSA2 attention (model-spec.md §3.6, §3.12): query path, window ring, compressor, index keys,
// lightning indexer with candidates and top-k, sparse attention with sinks, wo_a / wo_b.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/call_context.h"

namespace dsv4::cpu {

// One query head against a key list (nullptr = invalid entry) in blocks of 64 with the online
// softmax of the reference kernel: bf16 P relative to the running max, fp32/Acc denominator,
// the sink added to the denominator at the end; o = bf16(acc / sum). Tests: p_pre, the probabilities before their
// bf16 rounding [keys.size()] (0 at invalid entries), o_pre, acc / sum before its rounding [d].
template <typename Acc>
void sparse_attend_head(const float* q, const std::vector<const float*>& keys, int64_t d, Acc scale,
                        float sink, float* o, Acc* p_pre = nullptr, Acc* o_pre = nullptr);

// V4: top-k with ties to the lower row index, in descending score order (torch.topk's order).
std::vector<int32_t> select_topk_desc(const std::vector<float>& score, int64_t k);

// V4 per-head query RMS norm without weight, every op on bf16 tensors as the reference:
// bf16(q^2), bf16(mean), bf16(+eps), bf16(rsqrt), bf16(q * r); q bf16 [n] in place.
template <typename Acc>
void head_rms_bf16(float* q, int64_t n, float eps);

// Top-k with ties to the lower row index, returned in ascending row order.
std::vector<int32_t> select_topk_rows(const std::vector<float>& score, int64_t k);

// Layer 20's candidate rows: block max over `block` rows, the block of row n-1 forced in, the
// best `topk_blocks` blocks above -inf kept (ties to the lower block), expanded to rows [n].
std::vector<uint8_t> select_candidate_rows(const std::vector<float>& score, int64_t n,
                                           int64_t topk_blocks, int64_t block);

// y bf16 [out.rows, D] = attention of backbone layer `layer` for the rows of `out` on their inputs x_out
// bf16 [out.rows, D]. The window keys (and a KV source's compressor) are computed from x_in bf16 [in.rows, D]
// at the rows of `in`, which hold every row of `out` and, piece by piece, every row of the piece whose
// window key a row of `out` reads (bounded replay, docs/replay.md); in and out may be one context (then
// x_in == x_out). Updates the streams' caches of that layer and the call's published slots.
template <typename Acc>
void attention_layer(CallCtx& in, CallCtx& out, int layer, const float* x_in, const float* x_out, float* y_out);

// The same with every row of `c` both input and output (x, y bf16 [c.rows, D]).
template <typename Acc>
void attention_layer(CallCtx& c, int layer, const float* x, float* y) {
  attention_layer<Acc>(c, c, layer, x, x, y);
}

// The grouped wo_a (its FP8 values dequantized to bf16, as the reference holds it) and FP8 wo_b of the rows'
// attention outputs o bf16 [rows, H, d]. Tests: z_pre, wo_a's sums before their bf16 rounding [rows, G * o_lora],
// y_pre, wo_b's [rows, D].
template <typename Acc>
void attention_output(ThreadPool& pool, const family::LayerWeights& A, const family::ModelPlan& cfg,
                      const float* o, int64_t rows, float* y, Acc* z_pre = nullptr, Acc* y_pre = nullptr);

}  // namespace dsv4::cpu
