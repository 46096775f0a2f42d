// Span forms of the bf16 conversions.
#include "core/bf16.h"

#include "core/status.h"

namespace dsv4 {

void f32_to_bf16(std::span<const float> in, std::span<uint16_t> out) {
  DSV4_CHECK(in.size() == out.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = f32_to_bf16(in[i]);
}

void bf16_to_f32(std::span<const uint16_t> in, std::span<float> out) {
  DSV4_CHECK(in.size() == out.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = bf16_to_f32(in[i]);
}

void round_bf16(std::span<float> x) {
  for (float& v : x) v = round_bf16(v);
}

}  // namespace dsv4
