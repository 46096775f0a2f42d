// Decode table and span forms of the FP8 conversions.
#include "core/fp8.h"

#include <array>

#include "core/status.h"

namespace dsv4 {

const float* e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int b = 0; b < 256; ++b) t[b] = e4m3_to_f32(static_cast<uint8_t>(b));
    return t;
  }();
  return table.data();
}

void f32_to_e4m3(std::span<const float> in, std::span<uint8_t> out) {
  DSV4_CHECK(in.size() == out.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = f32_to_e4m3(in[i]);
}

void e4m3_to_f32(std::span<const uint8_t> in, std::span<float> out) {
  DSV4_CHECK(in.size() == out.size());
  const float* t = e4m3_table();
  for (size_t i = 0; i < in.size(); ++i) out[i] = t[in[i]];
}

void f32_to_e5m2(std::span<const float> in, std::span<uint8_t> out) {
  DSV4_CHECK(in.size() == out.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = f32_to_e5m2(in[i]);
}

void e5m2_to_f32(std::span<const uint8_t> in, std::span<float> out) {
  DSV4_CHECK(in.size() == out.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = e5m2_to_f32(in[i]);
}

}  // namespace dsv4
