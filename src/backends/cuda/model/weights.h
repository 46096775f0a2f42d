// Device views of the four linear weight formats (model-spec.md §3.1): plain pointers into an Arena.
// A view whose `exl3` is set stands for an EXL3 linear of a pack (exl3_view.h): its other pointers
// are null and every linear call of its kind runs the EXL3 one instead.
#pragma once

#include <cstdint>

namespace dsv4::cuda {

struct Exl3View;

// e4m3 [out, in] row-major; scale: ue8m0 exponent bytes [ceil(out/block), ceil(in/block)].
struct Fp8View {
  const uint8_t* w = nullptr;
  const uint8_t* scale = nullptr;
  int64_t out = 0, in = 0;
  int32_t block = 32;
  const Exl3View* exl3 = nullptr;
};

// e2m1 [out, in/2], element 2i in the low nibble; scale: ue8m0 [out, in/32].
struct Fp4View {
  const uint8_t* w = nullptr;
  const uint8_t* scale = nullptr;
  int64_t out = 0, in = 0;
  const Exl3View* exl3 = nullptr;
};

// bf16 bits [out, in].
struct Bf16View {
  const uint16_t* w = nullptr;
  int64_t out = 0, in = 0;
  const Exl3View* exl3 = nullptr;
};

// fp32 [out, in] (bf16 or f32 checkpoint weights widened exactly).
struct F32View {
  const float* w = nullptr;
  int64_t out = 0, in = 0;
  const Exl3View* exl3 = nullptr;
};

}  // namespace dsv4::cuda
