// Final collapse, norm and LM head (model-spec.md §3.8): fp32 logits from the bf16 stream. V4
// collapses with hc_head's own pre-mix (§8) instead of the last FFN's.
#pragma once

#include <vector>

#include "backends/cpu/mhc.h"
#include "backends/cpu/rmsnorm.h"
#include "family/deepseek_v41/layer_plan.h"

namespace dsv4::cpu {

// V4's final collapse weights (hc_head_fn f32 [C, C*D], hc_head_base f32 [C], hc_head_scale f32 [1]).
struct HcHead {
  const Matrix* fn = nullptr;
  Vec base;
  float scale = 1.0f;
};
inline HcHead hc_head_of(const Matrix& fn, const TensorView& base, const TensorView& scale) {
  const Vec s = floats(scale);
  return {&fn, floats(base), s.empty() ? 1.0f : s[0]};
}

// hc_head's pre-mix of one row h bf16 [C, D]: m = (fn . x) * rsqrt(mean(x^2) + eps),
// pre = sigmoid(m * scale + base) + hc_eps (no Sinkhorn).
template <typename Acc>
std::vector<Acc> hc_head_pre(ThreadPool& pool, const family::ModelPlan& cfg, const HcHead& W, const float* h) {
  const int C = cfg.hc_mult;
  const int64_t n = static_cast<int64_t>(C) * cfg.dim;
  std::vector<Acc> x(h, h + n), m(C), pre(C);
  f32_linear<Acc>(pool, x.data(), 1, *W.fn, m.data());
  const Acc mean = dot<Acc>(h, h, n) / static_cast<Acc>(n);
  const Acc rho = static_cast<Acc>(1) / std::sqrt(mean + static_cast<Acc>(cfg.norm_eps));
  for (int c = 0; c < C; ++c)
    pre[c] = sigmoid<Acc>(m[c] * rho * static_cast<Acc>(W.scale) + static_cast<Acc>(W.base[c])) +
             static_cast<Acc>(cfg.hc_eps);
  return pre;
}

// logits [rows, V] = head( RMSNorm( collapse(h_r, pi_r) ; norm ) ) for the listed rows; with
// hc (V4) the collapse uses hc_head's pre-mix instead of pi.
template <typename Acc>
void head_logits(ThreadPool& pool, const family::ModelPlan& cfg, const std::vector<float>& norm,
                 const Matrix& head, const float* h, const std::vector<std::vector<Acc>>& pi,
                 const std::vector<int64_t>& rows, std::vector<Acc>& logits, Vec* collapsed = nullptr,
                 const HcHead* hc = nullptr, Vec* normed = nullptr) {
  const int C = cfg.hc_mult;
  const int64_t D = cfg.dim, n = static_cast<int64_t>(rows.size());
  Vec x(n * D), xn(n * D);
  for (int64_t i = 0; i < n; ++i) {
    const float* hr = h + rows[i] * C * D;
    hc_collapse<Acc>(hr, C, D, hc ? hc_head_pre<Acc>(pool, cfg, *hc, hr) : pi[rows[i]], &x[i * D]);
  }
  rmsnorm_rows<Acc>(x.data(), n, D, norm.data(), cfg.norm_eps, xn.data());
  std::vector<Acc> xa(xn.begin(), xn.end());
  logits.resize(n * head.out());
  f32_linear<Acc>(pool, xa.data(), n, head, logits.data());
  if (collapsed) *collapsed = std::move(x);
  if (normed) *normed = std::move(xn);
}

}  // namespace dsv4::cpu
