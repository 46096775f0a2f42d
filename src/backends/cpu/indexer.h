// The lightning indexer of an index-source layer (model-spec.md §3.6): FP4 queries against the
// published index keys, bf16 scores, layer 20's candidate blocks, top-k; the selected rows are
// published per row for the following reuse layers.
#pragma once

#include <cmath>
#include <limits>

#include "backends/cpu/attention.h"
#include "backends/cpu/call_context.h"
#include "backends/cpu/hadamard.h"
#include "backends/cpu/kv_rows.h"
#include "backends/cpu/rope.h"

namespace dsv4::cpu {

// x bf16 [rows, D] (attention input), qr bf16 [rows, Q] (normed low-rank query) of c's rows (the query rows).
// Index keys: the layer's own (KV source) or its KV source's — dsv4 scores every index source
// against its own layer's keys in every call (model-spec.md §6.2), not the reference's stale
// keys at even-position decode steps.
template <typename Acc>
void index_layer(CallCtx& c, int layer, const float* x, const float* qr) {
  const family::ModelPlan& cfg = *c.cfg;
  const family::LayerPlan& role = (*c.roles)[layer];
  const family::LayerWeights& A = c.M->weights.layers[layer];
  const StateGeometry& geo = *c.geo;
  const int64_t rows = c.rows, IH = cfg.index_heads, ihd = cfg.index_head_dim, rd = cfg.rope_dim;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  Vec qi(rows * IH * ihd), wt(rows * IH);
  fp8_linear<Acc>(*c.pool, qr, rows, A.indexer_wq_b, qi.data(), cfg.act_block);
  bf16_linear<Acc>(*c.pool, x, rows, A.indexer_weights_proj, wt.data());
  // weights * (ihd^-0.5 * IH^-0.5): a bf16 tensor times a scalar, -> bf16.
  const float wscale = static_cast<float>(std::pow(static_cast<double>(ihd), -0.5) *
                                          std::pow(static_cast<double>(IH), -0.5));
  for (int64_t i = 0; i < rows * IH; ++i) wt[i] = round_bf16(wt[i] * wscale);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < IH; ++h) {
      float* qh = &qi[(r * IH + h) * ihd];
      rope_apply<Acc>(qh + ihd - rd, *c.freqs_yarn, c.pos[r], false);
      if (cfg.index_hadamard) hadamard_row<Acc>(qh, ihd);  // queries and keys rotated (V4, model-spec.md §8)
      qdq_row(cfg.index_format, qh, ihd, rd);
    }
  for (const PieceCtx& pc : c.pieces) {
    int src_layer = role.kv_from;
    // Reference quirk (model-spec.md §3.6, audit note 23): on a one-token decode call an owner
    // that makes no new row does not republish, so it scores against the most recently
    // published index keys (the previous call's last publisher).
    if (c.reference_shapes && role.attn == family::AttnKind::full && pc.start > 0 && pc.T == 1 &&
        (pc.start + 1) % role.compress_ratio != 0 &&
        pc.state->last_index_publisher >= 0)
      src_layer = pc.state->last_index_publisher;
    const LayerCache& src = pc.state->layers[src_layer];
    const int64_t n = static_cast<int64_t>(src.index_keys.size()) / geo.index_row;
    Vec keys(n * ihd);
    for (int64_t t = 0; t < n; ++t) unpack_row(cfg.index_format, &src.index_keys[t * geo.index_row], ihd, &keys[t * ihd], rd);
    c.pool->parallel_for(pc.T, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const int64_t r = pc.row0 + i, p = pc.start + i;
        const int64_t Lc = (p + 1) / role.compress_ratio;
        std::vector<float> score(Lc);
        for (int64_t t = 0; t < Lc; ++t) {
          // Each op's result is a bf16 tensor: dot -> bf16, relu, x weight -> bf16, head sum -> bf16.
          Acc s = 0;
          for (int64_t h = 0; h < IH; ++h) {
            float v = round_bf16(dot<Acc>(&qi[(r * IH + h) * ihd], &keys[t * ihd], ihd));
            v = std::max(v, 0.0f);
            s += static_cast<Acc>(round_bf16(v * wt[r * IH + h]));
          }
          score[t] = round_bf16(s);
        }
        const int64_t cr = c.call_row[r];  // published per call row
        if (role.candidate_source)
          c.pub->cand[cr] = select_candidate_rows(score, Lc, cfg.candidate_topk_blocks, cfg.candidate_block_size);
        if (role.uses_candidates)
          for (int64_t t = 0; t < Lc; ++t)
            if (!c.pub->cand[cr][t]) score[t] = neg_inf;
        // V4.1 sorts the picks by row; V4 keeps torch.topk's descending score order.
        const int64_t k = std::min<int64_t>(cfg.index_topk, Lc);
        c.pub->topk[cr] = cfg.topk_by_score ? select_topk_desc(score, k) : select_topk_rows(score, k);
      }
    }, 1);
  }
}

}  // namespace dsv4::cpu
