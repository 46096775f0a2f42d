// Span forms of the fp16 conversions.
#include "core/fp16.h"

#include "core/status.h"

namespace dsv4 {

void f32_to_f16(std::span<const float> in, std::span<uint16_t> out) {
  DSV4_CHECK(in.size() == out.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = f32_to_f16(in[i]);
}

void f16_to_f32(std::span<const uint16_t> in, std::span<float> out) {
  DSV4_CHECK(in.size() == out.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = f16_to_f32(in[i]);
}

}  // namespace dsv4
