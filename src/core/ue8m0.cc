// Span form of the UE8M0 decoder.
#include "core/ue8m0.h"

#include "core/status.h"

namespace dsv4 {

void ue8m0_to_f32(std::span<const uint8_t> in, std::span<float> out) {
  DSV4_CHECK(in.size() == out.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = ue8m0_to_f32(in[i]);
}

}  // namespace dsv4
