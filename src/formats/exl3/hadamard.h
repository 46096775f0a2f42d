// The 128-wide Sylvester Hadamard transform EXL3 applies on both sides of Wq (formats.md §1.4).
#pragma once

#include <cstdint>

namespace dsv4::exl3 {

inline constexpr int kHadamardSize = 128;

// In place, x[0..128) <- H·x with H[i][j] = (-1)^popcount(i & j), *unnormalized* (natural order).
// For fp16-derived inputs in double every butterfly is exact (values span < 53 bits).
template <typename T>
void hadamard128_unnormalized(T* x, int64_t stride = 1) {
  for (int len = 1; len < kHadamardSize; len <<= 1) {
    for (int i = 0; i < kHadamardSize; i += 2 * len) {
      for (int j = i; j < i + len; ++j) {
        const T a = x[j * stride];
        const T b = x[(j + len) * stride];
        x[j * stride] = a + b;
        x[(j + len) * stride] = a - b;
      }
    }
  }
}

}  // namespace dsv4::exl3
