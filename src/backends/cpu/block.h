// One transformer block. V4.1's delayed pre-mix (model-spec.md §3.8): the attention sub-layer
// collapses with the incoming pre-mix pi, the FFN sub-layer with the attention pre-mix, and the
// FFN pre-mix becomes the next block's pi. V4 (§8): each sub-layer collapses with its own pre-mix.
#pragma once

#include <functional>
#include <limits>
#include <vector>

#include "backends/cpu/mhc.h"
#include "backends/cpu/moe.h"
#include "backends/cpu/pre_round.h"
#include "backends/cpu/rmsnorm.h"
#include "family/deepseek_v41/layer_plan.h"

namespace dsv4::cpu {

// Tests only: a named sub-layer output ("attn.in" [rows, D], "attn.out", "attn.h" [rows, C, D],
// "ffn.in", "ffn.out") and its length.
using BlockProbe = std::function<void(const char* op, const float* v, int64_t n)>;

// attn(x_in bf16 [rows, D], x_out bf16 [kept, D], y bf16 [kept, D]) runs the block's attention for the kept
// rows on the normed rows (every row's x_in: its window keys).
using RowsAttn = std::function<void(const float* x_in, const float* x_out, float* y)>;

// One block on h bf16 [rows, C, D] and pi [rows] whose output is computed only at the rows `keep` (ascending
// indices into the input rows; null: every row): h and pi leave holding those rows, in order. The attention
// sub-layer's input is normed at every row (its window keys), everything after it at the kept rows; a kept
// row's values do not depend on which other rows are kept. image, ids: per kept row (the MoE's); K experts
// per row. pre_round (tests, every row kept): the mixing coefficients and the values the collapses, norms and
// expands round, before rounding (pre_round.h).
template <typename Acc>
void block_forward_rows(ThreadPool& pool, const family::ModelPlan& cfg, const family::LayerWeights& B, int K,
                        int64_t rows, const std::vector<int64_t>* keep, const RowsAttn& attn, const uint8_t* image,
                        const int32_t* ids, std::vector<float>& h, std::vector<std::vector<Acc>>& pi,
                        const BlockProbe& probe = nullptr, const PreRoundSink* pre_round = nullptr) {
  auto show = [&](const char* op, const float* v, int64_t n) { if (probe) probe(op, v, n); };
  const bool same = cfg.premix == family::HcPremix::own;
  const int C = cfg.hc_mult;
  const int64_t D = cfg.dim;
  Vec x(rows * D), xn(rows * D);
  // attention sub-layer
  const Vec attn_norm = floats(B.attn_norm), ffn_norm = floats(B.ffn_norm);
  // The taps: a sub-layer's coefficients (unrounded), and its collapse, norm and expand before their roundings.
  const PreRoundSink* tap = pre_round;
  auto give_mix = [&](const char* pre_name, const char* post_name, const char* comb_name,
                      const std::vector<HcMix<Acc>>& mix) {
    if (!tap) return;
    std::vector<Acc> pre, post, comb;
    for (const HcMix<Acc>& m : mix) {
      pre.insert(pre.end(), m.pre.begin(), m.pre.end());
      post.insert(post.end(), m.post.begin(), m.post.end());
      comb.insert(comb.end(), m.A.begin(), m.A.end());
    }
    give_pre_round(tap, pre_name, static_cast<int64_t>(mix.size()), pre);
    give_pre_round(tap, post_name, static_cast<int64_t>(mix.size()), post);
    give_pre_round(tap, comb_name, static_cast<int64_t>(mix.size()), comb);
  };
  if (tap) give_pre_round(tap, "h_in", rows, std::vector<Acc>(h.begin(), h.end()));  // bf16 already (after Engram)
  std::vector<Acc> t_collapse = pre_round_slots<Acc>(tap, rows * D), t_norm = pre_round_slots<Acc>(tap, rows * D),
                   t_post = pre_round_slots<Acc>(tap, rows * C * D);
  auto at = [](std::vector<Acc>& v, int64_t i) { return v.empty() ? nullptr : &v[i]; };
  auto amix = hc_mixes<Acc>(pool, h.data(), rows, C, D, hc_attn_params(B), cfg.norm_eps, cfg.hc_eps, cfg.hc_sinkhorn_iters);
  give_mix("attn_mix_pre", "attn_mix_post", "attn_mix_comb", amix);
  for (int64_t r = 0; r < rows; ++r)
    hc_collapse<Acc>(&h[r * C * D], C, D, same ? amix[r].pre : pi[r], &x[r * D], at(t_collapse, r * D));
  rmsnorm_rows<Acc>(x.data(), rows, D, attn_norm.data(), cfg.norm_eps, xn.data(), slots_of(t_norm));
  give_pre_round(tap, "attn_collapse", rows, t_collapse);
  give_pre_round(tap, "attn_norm", rows, t_norm);
  show("attn.in", xn.data(), rows * D);
  // The kept rows, moved to the front in order (keep is ascending and keep[r] >= r: a row is moved before
  // its place is overwritten).
  Vec xk;
  const float* x_out = xn.data();
  if (keep) {
    const int64_t n = static_cast<int64_t>(keep->size());
    xk.resize(n * D);
    for (int64_t r = 0; r < n; ++r) {
      const int64_t from = (*keep)[r];
      std::copy(&xn[from * D], &xn[(from + 1) * D], &xk[r * D]);
      if (from != r) {
        std::copy(&h[from * C * D], &h[(from + 1) * C * D], &h[r * C * D]);
        amix[r] = amix[from];
      }
    }
    rows = n;
    h.resize(rows * C * D);
    amix.resize(rows);
    pi.resize(rows);
    x_out = xk.data();
  }
  Vec y(rows * D);
  attn(xn.data(), x_out, y.data());
  show("attn.out", y.data(), rows * D);
  if (tap) {  // the kept rows from here on
    t_collapse.assign(rows * D, std::numeric_limits<Acc>::quiet_NaN());
    t_norm.assign(rows * D, std::numeric_limits<Acc>::quiet_NaN());
    t_post.assign(rows * C * D, std::numeric_limits<Acc>::quiet_NaN());
  }
  for (int64_t r = 0; r < rows; ++r) hc_expand<Acc>(&y[r * D], &h[r * C * D], C, D, amix[r], at(t_post, r * C * D));
  give_pre_round(tap, "attn_post", rows, t_post);
  show("attn.h", h.data(), rows * C * D);
  // FFN sub-layer, collapsed with the attention pre-mix
  auto fmix = hc_mixes<Acc>(pool, h.data(), rows, C, D, hc_ffn_params(B), cfg.norm_eps, cfg.hc_eps, cfg.hc_sinkhorn_iters);
  give_mix("ffn_mix_pre", "ffn_mix_post", "ffn_mix_comb", fmix);
  for (int64_t r = 0; r < rows; ++r)
    hc_collapse<Acc>(&h[r * C * D], C, D, same ? fmix[r].pre : amix[r].pre, &x[r * D], at(t_collapse, r * D));
  rmsnorm_rows<Acc>(x.data(), rows, D, ffn_norm.data(), cfg.norm_eps, xn.data(), slots_of(t_norm));
  give_pre_round(tap, "ffn_collapse", rows, t_collapse);
  give_pre_round(tap, "ffn_norm", rows, t_norm);
  show("ffn.in", xn.data(), rows * D);
  moe_forward<Acc>(pool, B, K, cfg, xn.data(), image, ids, rows, y.data());
  show("ffn.out", y.data(), rows * D);
  for (int64_t r = 0; r < rows; ++r) hc_expand<Acc>(&y[r * D], &h[r * C * D], C, D, fmix[r], at(t_post, r * C * D));
  give_pre_round(tap, "ffn_post", rows, t_post);
  for (int64_t r = 0; r < rows; ++r) pi[r] = fmix[r].pre;
}

// attn(x bf16 [rows, D], y bf16 [rows, D]) runs the block's attention on the normed rows; K experts per row.
template <typename Acc>
void block_forward(ThreadPool& pool, const family::ModelPlan& cfg, const family::LayerWeights& B, int K, int64_t rows,
                   const std::function<void(const float*, float*)>& attn, const uint8_t* image,
                   const int32_t* ids, std::vector<float>& h, std::vector<std::vector<Acc>>& pi,
                   const BlockProbe& probe = nullptr) {
  block_forward_rows<Acc>(pool, cfg, B, K, rows, nullptr, [&](const float* x, const float*, float* y) { attn(x, y); },
                          image, ids, h, pi, probe);
}

// Embedding rows (embed bf16 [V, D]) expanded into C identical streams, pi = one-hot(0).
template <typename Acc>
void embed_rows(const family::ModelPlan& cfg, const TensorView& embed, const int32_t* ids,
                int64_t rows, std::vector<float>& h, std::vector<std::vector<Acc>>& pi) {
  const int C = cfg.hc_mult;
  const int64_t D = cfg.dim;
  h.resize(rows * C * D);
  pi.assign(rows, std::vector<Acc>(C, 0));
  for (int64_t r = 0; r < rows; ++r) {
    pi[r][0] = 1;
    floats_at(embed, static_cast<int64_t>(ids[r]) * D, D, &h[r * C * D]);
    for (int c = 1; c < C; ++c) std::copy(&h[r * C * D], &h[r * C * D] + D, &h[(r * C + c) * D]);
  }
}

}  // namespace dsv4::cpu
