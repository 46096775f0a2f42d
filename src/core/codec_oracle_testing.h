// Test-only reference for the number-format codecs, written independently of the code under test.
//
// Each format is described by its positive finite values listed in increasing order as exact
// doubles built from the spec's value formulas (formats.md §3.1-§3.4, IEEE 754 for bf16/fp16);
// the unsigned code of a value is its index in that list (codes are monotonic in value). The
// nearest value to x is found by exact comparison against the midpoint of the two neighbours
// (midpoints of these short-mantissa values are exact doubles); a tie picks the even code. No bit
// manipulation of the encoded formats is used here.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace dsv4::testing {

struct Grid {
  std::string name;
  std::vector<double> values;  // positive finite values, increasing; index = unsigned code
  uint32_t sign_bit;           // OR-ed into the code for negative inputs
  bool saturates;              // beyond the max: clamp (satfinite) or round to infinity (IEEE)
  uint32_t inf_code;           // unsigned code of +inf when !saturates
  double next_after_max;       // the value an unbounded exponent range would have after the max
};

// IEEE-style format with `man` mantissa bits, exponent bias `bias`, and biased exponents
// 1..max_exp for normals; `last_mantissa` caps the mantissa at the top exponent (e4m3fn has
// 0..6 there, its 7 being NaN).
inline std::vector<double> enumerate_values(int man, int bias, int max_exp, int last_mantissa) {
  std::vector<double> v;
  const int m_count = 1 << man;
  for (int m = 0; m < m_count; ++m) v.push_back(std::ldexp(static_cast<double>(m), 1 - bias - man));
  for (int e = 1; e <= max_exp; ++e)
    for (int m = 0; m < m_count; ++m) {
      if (e == max_exp && m > last_mantissa) break;
      v.push_back(std::ldexp(static_cast<double>(m_count + m), e - bias - man));
    }
  return v;
}

inline Grid e4m3_grid() {
  return {"e4m3", enumerate_values(3, 7, 15, 6), 0x80, true, 0, 480.0};
}
inline Grid e5m2_grid(bool saturate) {
  return {"e5m2", enumerate_values(2, 15, 30, 3), 0x80, saturate, 0x7C, 65536.0};
}
inline Grid e2m1_grid() {
  // formats.md §3.3 lists the magnitudes directly.
  return {"e2m1", {0, 0.5, 1, 1.5, 2, 3, 4, 6}, 0x8, true, 0, 8.0};
}
inline Grid f16_grid() {
  return {"f16", enumerate_values(10, 15, 30, 1023), 0x8000, false, 0x7C00, 65536.0};
}
inline Grid bf16_grid() {
  return {"bf16", enumerate_values(7, 127, 254, 127), 0x8000, false, 0x7F80, std::ldexp(1.0, 128)};
}

// Nearest code for a finite or infinite non-NaN input given as an exact double.
inline uint32_t nearest_code(const Grid& g, double x) {
  const bool neg = std::signbit(x);
  const double a = std::fabs(x);
  const auto& v = g.values;
  const uint32_t top = static_cast<uint32_t>(v.size() - 1);
  uint32_t code;
  if (a >= v[top]) {
    const double mid = (v[top] + g.next_after_max) / 2;
    // The top code is odd, so a tie with the virtual next value goes past the max.
    if (g.saturates || a < mid) code = top;
    else code = g.inf_code;
  } else {
    // Largest index lo with v[lo] <= a.
    uint32_t lo = 0, hi = top;
    while (hi - lo > 1) {
      const uint32_t m = (lo + hi) / 2;
      if (v[m] <= a) lo = m;
      else hi = m;
    }
    const double mid = (v[lo] + v[lo + 1]) / 2;
    if (a < mid) code = lo;
    else if (a > mid) code = lo + 1;
    else code = (lo % 2 == 0) ? lo : lo + 1;
  }
  return neg ? (code | g.sign_bit) : code;
}

// Exact value of a code (finite codes only).
inline double code_value(const Grid& g, uint32_t code) {
  const double a = g.values.at(code & ~g.sign_bit);
  return (code & g.sign_bit) ? -a : a;
}

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace dsv4::testing

#include <gtest/gtest.h>

#include <random>

namespace dsv4::testing {

// fp32 bit patterns that stress a conversion: every bf16 value, every fp32 exponent boundary and
// its neighbours, every value and midpoint of each grid (and +-2 ulp around them, both signs),
// and 2^20 seeded random patterns. NaN patterns are left out (tested separately).
inline std::vector<uint32_t> conversion_inputs(const std::vector<Grid>& grids) {
  std::vector<uint32_t> in;
  for (uint32_t b = 0; b < 65536; ++b) in.push_back(b << 16);
  auto around = [&](uint32_t u) {
    for (int d = -2; d <= 2; ++d) {
      const uint32_t v = (u & 0x7FFFFFFFu) + static_cast<uint32_t>(d);
      if ((v & 0x80000000u) != 0) continue;  // wrapped below +0
      in.push_back(v);
      in.push_back(v | 0x80000000u);
    }
  };
  for (uint32_t e = 0; e < 256; ++e) {
    around(e << 23);
    around((e << 23) | 0x7FFFFFu);
    around((e << 23) | 0x400000u);
  }
  for (const Grid& g : grids) {
    const auto& v = g.values;
    for (size_t i = 0; i < v.size(); ++i) {
      const double next = i + 1 < v.size() ? v[i + 1] : g.next_after_max;
      around(float_to_bits(static_cast<float>(v[i])));
      around(float_to_bits(static_cast<float>((v[i] + next) / 2)));  // exact: short mantissas
    }
    around(float_to_bits(static_cast<float>(g.next_after_max)));
  }
  std::mt19937 rng(20261129);
  for (int i = 0; i < (1 << 20); ++i) in.push_back(rng());
  std::vector<uint32_t> out;
  for (uint32_t u : in)
    if ((u & 0x7FFFFFFFu) <= 0x7F800000u) out.push_back(u);  // drop NaNs
  return out;
}

// The input set above for all five grids, built once.
inline const std::vector<uint32_t>& all_conversion_inputs() {
  static const std::vector<uint32_t> inputs =
      conversion_inputs({e4m3_grid(), e5m2_grid(false), e2m1_grid(), f16_grid(), bf16_grid()});
  return inputs;
}

// Checks encode(x) == nearest_code(g, x) over all_conversion_inputs(); reports the first 10 misses.
template <class F>
void check_encoder(const Grid& g, F encode) {
  const std::vector<uint32_t>& inputs = all_conversion_inputs();
  int bad = 0;
  for (uint32_t u : inputs) {
    const float x = bits_to_float(u);
    const uint32_t want = nearest_code(g, static_cast<double>(x));
    const uint32_t got = encode(x);
    if (got != want && ++bad <= 10)
      ADD_FAILURE() << g.name << " input bits 0x" << std::hex << u << " (" << x << "): got 0x" << got
                    << " want 0x" << want;
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(inputs.size(), 1000000u);
}

}  // namespace dsv4::testing
