// A stored linear's exact values, [out, in] row-major, decoded from its bytes: e4m3 or packed e2m1 codes times
// their UE8M0 scales (exact products: the scales are powers of two), BF16 or F32 matrices widened. What the EXL3
// encoders read (synth_exl3.cc from a tensor source's release bytes, synthetic_exl3.cc from a model's views).
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace dsv4::family {

// FP8 linear: e4m3 codes [out, in] times the scale [ceil(out / block_out), scale_cols] of their
// block_out x block_in tile.
std::vector<float> fp8_linear_values(const uint8_t* codes, const uint8_t* scales, int64_t out, int64_t in,
                                     int64_t block_out, int64_t block_in, int64_t scale_cols);

// FP4 linear: e2m1 codes [out, in] packed two per byte (element 2c in the low nibble of byte c) times the scale
// [out, scale_cols] of their 32 along K.
std::vector<float> fp4_linear_values(const uint8_t* packed, const uint8_t* scales, int64_t out, int64_t in,
                                     int64_t scale_cols);

// A plain matrix: n BF16 (little-endian) or F32 values widened exactly; any other dtype is a programming error.
// `bytes` may be unaligned.
std::vector<float> matrix_values(const uint8_t* bytes, DType dtype, int64_t n);

}  // namespace dsv4::family
