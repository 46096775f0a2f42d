// The Walsh-Hadamard rotation of V4's indexer (model-spec.md §8, the reference's
// rotate_activation = fast_hadamard_transform(x, scale = n^-0.5)): Sylvester order,
// y_i = n^-0.5 * sum_k (-1)^popcount(i & k) x_k, butterflies in Acc, one rounding to bf16.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/cpu/numerics.h"

namespace dsv4::cpu {

// In place on x bf16 [n], n a power of two.
template <typename Acc>
void hadamard_row(float* x, int64_t n) {
  std::vector<Acc> v(x, x + n);
  for (int64_t h = 1; h < n; h *= 2)
    for (int64_t i = 0; i < n; i += 2 * h)
      for (int64_t j = i; j < i + h; ++j) {
        const Acc a = v[j], b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
  const Acc scale = static_cast<Acc>(1.0 / std::sqrt(static_cast<double>(n)));
  for (int64_t i = 0; i < n; ++i) x[i] = round_bf16(v[i] * scale);
}

}  // namespace dsv4::cpu
