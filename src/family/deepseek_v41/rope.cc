// RoPE frequencies (see rope.h).
#include "family/deepseek_v41/rope.h"

#include <algorithm>
#include <cmath>

namespace dsv4::family {

RopeParams rope_params(const ModelPlan& plan, bool yarn) {
  if (!yarn) return RopeParams{plan.rope_dim, plan.rope_theta, 0, plan.rope_factor, plan.beta_fast, plan.beta_slow};
  return RopeParams{plan.rope_dim, plan.compress_rope_theta, plan.original_seq_len, plan.rope_factor, plan.beta_fast,
                    plan.beta_slow};
}

std::vector<float> rope_frequencies(const RopeParams& p) {
  const int half = p.dim / 2;
  std::vector<float> f(half);
  for (int i = 0; i < half; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(p.dim);
    f[i] = 1.0f / std::pow(static_cast<float>(p.base), e);
  }
  if (p.original_seq_len > 0) {
    // Correction range from Python doubles, as the reference computes it.
    auto corr = [&](double r) {
      return p.dim * std::log(static_cast<double>(p.original_seq_len) / (r * 2 * M_PI)) /
             (2 * std::log(p.base));
    };
    double low = std::max(std::floor(corr(p.beta_fast)), 0.0);
    double high = std::min(std::ceil(corr(p.beta_slow)), static_cast<double>(p.dim - 1));
    if (low == high) high += 0.001;
    const float lo = static_cast<float>(low), span = static_cast<float>(high - low);
    const float factor = static_cast<float>(p.factor);
    for (int i = 0; i < half; ++i) {
      float ramp = (static_cast<float>(i) - lo) / span;
      ramp = std::min(std::max(ramp, 0.0f), 1.0f);
      const float smooth = 1.0f - ramp;
      // f/factor*(1-smooth) + f*smooth, each op in fp32: 1-(1-ramp) != ramp in fp32 for some i.
      const float a = (f[i] / factor) * (1.0f - smooth);
      const float b = f[i] * smooth;
      f[i] = a + b;
    }
  }
  return f;
}

}  // namespace dsv4::family
