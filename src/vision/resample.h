// PIL's bicubic resize of 8-bit RGB (Image.resize with Resampling.BICUBIC), reimplemented to give the same
// bytes: a separable convolution, horizontal pass first, each pass rounded to 8 bits.
#pragma once

#include <cstdint>

#include "vision/image.h"

namespace dsv4::vision {

// The filter, as PIL defines it: cubic convolution with a = -0.5, support 2 (Keys).
double bicubic_kernel(double x);

// Resizes `in` to width x height (both >= 1). Per axis: scale = in/out; the kernel is stretched by
// max(scale, 1) (so it averages when shrinking); output sample i is centred at (i + 0.5) * scale in input
// coordinates; the taps are the input samples whose centres fall within the support, their weights
// normalised to sum 1, then fixed to 22 fractional bits (round half away from zero). Each pass accumulates
// integers from 2^21 (the rounding half), shifts right by 22 and clips to [0, 255]. An axis whose size does
// not change is not filtered. Identical to PIL 9.4 (and every Pillow since 7) bit for bit.
Image resize_bicubic(const Image& in, int32_t width, int32_t height);

}  // namespace dsv4::vision
