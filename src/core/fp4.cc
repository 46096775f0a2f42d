// Span forms of the e2m1 conversions and packing.
#include "core/fp4.h"

#include "core/status.h"

namespace dsv4 {

void pack_e2m1(std::span<const uint8_t> codes, std::span<uint8_t> bytes) {
  DSV4_CHECK(codes.size() == 2 * bytes.size());
  for (size_t c = 0; c < bytes.size(); ++c) bytes[c] = pack_e2m1_pair(codes[2 * c], codes[2 * c + 1]);
}

void unpack_e2m1(std::span<const uint8_t> bytes, std::span<uint8_t> codes) {
  DSV4_CHECK(codes.size() == 2 * bytes.size());
  for (size_t c = 0; c < bytes.size(); ++c) {
    codes[2 * c] = e2m1_nibble(bytes[c], 0);
    codes[2 * c + 1] = e2m1_nibble(bytes[c], 1);
  }
}

void f32_to_e2m1_packed(std::span<const float> x, std::span<uint8_t> bytes) {
  DSV4_CHECK(x.size() == 2 * bytes.size());
  for (size_t c = 0; c < bytes.size(); ++c)
    bytes[c] = pack_e2m1_pair(f32_to_e2m1(x[2 * c]), f32_to_e2m1(x[2 * c + 1]));
}

void e2m1_packed_to_f32(std::span<const uint8_t> bytes, std::span<float> x) {
  DSV4_CHECK(x.size() == 2 * bytes.size());
  for (size_t c = 0; c < bytes.size(); ++c) {
    x[2 * c] = e2m1_to_f32(e2m1_nibble(bytes[c], 0));
    x[2 * c + 1] = e2m1_to_f32(e2m1_nibble(bytes[c], 1));
  }
}

}  // namespace dsv4
