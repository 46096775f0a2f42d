// RMSNorm of model-spec.md §3.1: y = bf16( w * (x * rsqrt(mean(x^2) + eps)) ), statistics in Acc.
#pragma once

#include <cmath>
#include <cstdint>

#include "backends/cpu/linear.h"

namespace dsv4::cpu {

// Sum of squares in the fixed dot order.
template <typename Acc>
inline Acc sum_squares(const float* x, int64_t n) { return dot<Acc>(x, x, n); }

// One row: x bf16 [n], w bf16 [n] (or none: weight 1), y bf16 [n] (may alias x); pre (tests): the values before
// the rounding [n].
template <typename Acc>
void rmsnorm_row(const float* x, int64_t n, const float* w, float eps, float* y, Acc* pre = nullptr) {
  const Acc mean = sum_squares<Acc>(x, n) / static_cast<Acc>(n);
  const Acc r = static_cast<Acc>(1) / std::sqrt(mean + static_cast<Acc>(eps));
  for (int64_t i = 0; i < n; ++i) {
    const Acc v = static_cast<Acc>(x[i]) * r;
    const Acc wv = w ? static_cast<Acc>(w[i]) * v : v;
    if (pre) pre[i] = wv;
    y[i] = round_bf16(wv);
  }
}

template <typename Acc>
void rmsnorm_rows(const float* x, int64_t rows, int64_t n, const float* w, float eps, float* y, Acc* pre = nullptr) {
  for (int64_t m = 0; m < rows; ++m) rmsnorm_row<Acc>(x + m * n, n, w, eps, y + m * n, pre ? pre + m * n : nullptr);
}

}  // namespace dsv4::cpu
