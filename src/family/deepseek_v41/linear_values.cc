// Stored linears decoded to their exact values (see linear_values.h).
#include "family/deepseek_v41/linear_values.h"

#include <cstring>

#include "core/bf16.h"
#include "core/fp4.h"
#include "core/fp8.h"
#include "core/status.h"
#include "core/ue8m0.h"

namespace dsv4::family {

std::vector<float> fp8_linear_values(const uint8_t* codes, const uint8_t* scales, int64_t out, int64_t in,
                                     int64_t block_out, int64_t block_in, int64_t scale_cols) {
  std::vector<float> v(static_cast<size_t>(out * in));
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i)
      v[o * in + i] =
          e4m3_to_f32(codes[o * in + i]) * ue8m0_to_f32(scales[(o / block_out) * scale_cols + i / block_in]);
  return v;
}

std::vector<float> fp4_linear_values(const uint8_t* packed, const uint8_t* scales, int64_t out, int64_t in,
                                     int64_t scale_cols) {
  std::vector<float> v(static_cast<size_t>(out * in));
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i)
      v[o * in + i] = e2m1_to_f32(e2m1_nibble(packed[o * (in / 2) + i / 2], static_cast<int>(i % 2))) *
                      ue8m0_to_f32(scales[o * scale_cols + i / 32]);
  return v;
}

std::vector<float> matrix_values(const uint8_t* bytes, DType dtype, int64_t n) {
  DSV4_CHECK(dtype == DType::bf16 || dtype == DType::f32);
  std::vector<float> v(static_cast<size_t>(n));
  if (dtype == DType::f32) {
    if (n > 0) std::memcpy(v.data(), bytes, static_cast<size_t>(4 * n));
    return v;
  }
  for (int64_t i = 0; i < n; ++i) v[i] = bf16_to_f32(static_cast<uint16_t>(bytes[2 * i] | bytes[2 * i + 1] << 8));
  return v;
}

}  // namespace dsv4::family
