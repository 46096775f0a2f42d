// The FP8 / FP4 weight as the low-precision kernels see it (linear.cu, moe_experts.cu), and the
// per-format constants of its decode.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "core/bf16.h"
#include "core/fp8.h"
#include "core/quant.h"
#include "core/ue8m0.h"

namespace dsv4::cuda::lowp {

enum class Fmt { fp8, fp4 };

// A quantized weight: element k of column n in byte w + n*row_bytes + k*bytes_per_element (FP4: two
// per byte, the even k in the low nibble); its ue8m0 scale byte at
// scale + (n / scale_rows) * scale_stride + k / scale_cols.
struct LowpWeight {
  const uint8_t* w;
  const uint8_t* scale;
  int64_t out, in, row_bytes, scale_stride;
  int32_t scale_rows, scale_cols;
};

template <Fmt F> struct Traits;
template <> struct Traits<Fmt::fp8> {
  static constexpr int kElems = 16;    // e4m3 per 16-byte unit
  static constexpr float kFactor = 1.0f;
};
template <> struct Traits<Fmt::fp4> {
  static constexpr int kElems = 32;    // e2m1 per 16-byte unit
  static constexpr float kFactor = 16384.0f;  // the f16 decode yields w * 2^-14 (lowp_mma.cuh)
};

}  // namespace dsv4::cuda::lowp
