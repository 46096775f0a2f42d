// Helpers shared by the GPU forward tests: the fixed test prompts, row lists, NRMS and argmax.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace dsv4::gpu_testing {

// A deterministic prompt of n token ids over the V4.1 vocabulary; `salt` picks another one.
inline std::vector<int32_t> prompt(int n, int salt = 0) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 7919 + 13 + salt * 104729) % 129280);
  return t;
}

// Rows 0..n-1 (logits of every row of a piece).
inline std::vector<int32_t> all_rows(int n) {
  std::vector<int32_t> r(n);
  for (int i = 0; i < n; ++i) r[i] = i;
  return r;
}

// ||a - ref|| / ||ref|| in double (||a - ref|| when ref is all zero).
inline double nrms(const float* a, const float* ref, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// NaN (so every bound fails) when the sizes differ.
inline double nrms(const std::vector<float>& a, const std::vector<float>& ref) {
  return a.size() == ref.size() ? nrms(a.data(), ref.data(), static_cast<int64_t>(a.size()))
                                : std::numeric_limits<double>::quiet_NaN();
}

// Index of the largest value, the lowest index on ties.
inline int64_t argmax(const float* v, int64_t n) {
  int64_t b = 0;
  for (int64_t i = 1; i < n; ++i)
    if (v[i] > v[b]) b = i;
  return b;
}

}  // namespace dsv4::gpu_testing
