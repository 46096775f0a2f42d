// Final collapse, norm and LM head (model-spec.md §3.8): fp32 logits from the bf16 stream.
#pragma once

#include <vector>

#include "backends/cpu/mhc.h"
#include "backends/cpu/rmsnorm.h"
#include "backends/cpu/weights.h"

namespace dsv4::cpu {

// logits [rows, V] = head( RMSNorm( collapse(h_r, pi_r) ; norm ) ) for the listed rows.
template <typename Acc>
void head_logits(ThreadPool& pool, const ModelConfig& cfg, const std::vector<float>& norm,
                 const F32Weight& head, const float* h, const std::vector<std::vector<Acc>>& pi,
                 const std::vector<int64_t>& rows, std::vector<Acc>& logits, Vec* collapsed = nullptr) {
  const int C = cfg.hc_mult;
  const int64_t D = cfg.dim, n = static_cast<int64_t>(rows.size());
  Vec x(n * D), xn(n * D);
  for (int64_t i = 0; i < n; ++i) hc_collapse<Acc>(h + rows[i] * C * D, C, D, pi[rows[i]], &x[i * D]);
  rmsnorm_rows<Acc>(x.data(), n, D, norm.data(), cfg.norm_eps, xn.data());
  std::vector<Acc> xa(xn.begin(), xn.end());
  logits.resize(n * head.out);
  f32_linear<Acc>(pool, xa.data(), n, head, logits.data());
  if (collapsed) *collapsed = std::move(x);
}

}  // namespace dsv4::cpu
