// Device views of the four linear weight formats (model-spec.md §3.1): plain pointers into an Arena.
#pragma once

#include <cstdint>

namespace dsv4::cuda {

// e4m3 [out, in] row-major; scale: ue8m0 exponent bytes [ceil(out/block), ceil(in/block)].
struct Fp8View {
  const uint8_t* w = nullptr;
  const uint8_t* scale = nullptr;
  int64_t out = 0, in = 0;
  int32_t block = 32;
};

// e2m1 [out, in/2], element 2i in the low nibble; scale: ue8m0 [out, in/32].
struct Fp4View {
  const uint8_t* w = nullptr;
  const uint8_t* scale = nullptr;
  int64_t out = 0, in = 0;
};

// bf16 bits [out, in].
struct Bf16View {
  const uint16_t* w = nullptr;
  int64_t out = 0, in = 0;
};

// fp32 [out, in] (bf16 or f32 checkpoint weights widened exactly).
struct F32View {
  const float* w = nullptr;
  int64_t out = 0, in = 0;
};

}  // namespace dsv4::cuda
