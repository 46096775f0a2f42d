// RoPE frequencies and rotation (see rope.h).
#include "backends/cpu/rope.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/numerics.h"

namespace dsv4::cpu {

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

void rope_cos_sin(const std::vector<float>& freqs, int64_t pos, float* c, float* s) {
  const float fp = static_cast<float>(pos);
  for (size_t i = 0; i < freqs.size(); ++i) {
    const float angle = fp * freqs[i];
    c[i] = std::cos(angle);
    s[i] = std::sin(angle);
  }
}

template <typename Acc>
void rope_apply(float* x, const std::vector<float>& freqs, int64_t pos, bool inverse) {
  const size_t half = freqs.size();
  float c[256], s[256];
  rope_cos_sin(freqs, pos, c, s);
  for (size_t j = 0; j < half; ++j) {
    const Acc a = x[2 * j], b = x[2 * j + 1];
    const Acc cj = c[j], sj = inverse ? -s[j] : s[j];
    x[2 * j] = round_bf16(a * cj - b * sj);
    x[2 * j + 1] = round_bf16(a * sj + b * cj);
  }
}

template void rope_apply<float>(float*, const std::vector<float>&, int64_t, bool);
template void rope_apply<double>(float*, const std::vector<float>&, int64_t, bool);

}  // namespace dsv4::cpu
