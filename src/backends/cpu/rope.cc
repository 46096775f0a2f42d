// RoPE frequencies and rotation (see rope.h).
#include "backends/cpu/rope.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/numerics.h"

namespace dsv4::cpu {

void rope_cos_sin(const std::vector<float>& freqs, int64_t pos, float* c, float* s) {
  const float fp = static_cast<float>(pos);
  for (size_t i = 0; i < freqs.size(); ++i) {
    const float angle = fp * freqs[i];
    c[i] = std::cos(angle);
    s[i] = std::sin(angle);
  }
}

template <typename Acc>
void rope_apply(float* x, const std::vector<float>& freqs, int64_t pos, bool inverse, Acc* pre) {
  const size_t half = freqs.size();
  float c[256], s[256];
  rope_cos_sin(freqs, pos, c, s);
  for (size_t j = 0; j < half; ++j) {
    const Acc a = x[2 * j], b = x[2 * j + 1];
    const Acc cj = c[j], sj = inverse ? -s[j] : s[j];
    const Acc re = a * cj - b * sj, im = a * sj + b * cj;
    if (pre) pre[2 * j] = re, pre[2 * j + 1] = im;
    x[2 * j] = round_bf16(re);
    x[2 * j + 1] = round_bf16(im);
  }
}

template void rope_apply<float>(float*, const std::vector<float>&, int64_t, bool, float*);
template void rope_apply<double>(float*, const std::vector<float>&, int64_t, bool, double*);

}  // namespace dsv4::cpu
