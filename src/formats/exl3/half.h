// IEEE binary16 helpers for EXL3 decode: exact decode and one correctly rounded encode from double.
#pragma once

#include <cstdint>

namespace dsv4::exl3 {

// The exact value of an fp16 bit pattern (core f16_to_f32 widened; inf and NaN map to inf/NaN).
double half_bits_to_double(uint16_t bits);

// Rounds a double to the nearest fp16 (ties to even, subnormals, overflow to inf): one rounding,
// which is what the EXL3 kernels' __hadd / __hfma produce from exactly representable operands.
uint16_t double_to_half_bits(double value);

}  // namespace dsv4::exl3
