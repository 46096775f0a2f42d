// Separable bicubic resampling with PIL's coefficient windows and fixed-point rounding.
#include "vision/resample.h"

#include <cmath>
#include <vector>

#include "core/status.h"

namespace dsv4::vision {
namespace {

constexpr int kFracBits = 22;  // 32 bits - 8 for the sample - 2 of headroom for negative lobes / overshoot

// One output sample's taps: input samples [first, first + count) with fixed-point weights.
struct Taps {
  int32_t first = 0;
  int32_t count = 0;
  std::vector<int32_t> weights;
};

// The windows of one axis resized from in_size to out_size.
std::vector<Taps> axis_taps(int32_t in_size, int32_t out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double stretch = scale < 1.0 ? 1.0 : scale;
  const double support = 2.0 * stretch;
  const double inv_stretch = 1.0 / stretch;
  std::vector<Taps> out(out_size);
  std::vector<double> w;
  for (int32_t i = 0; i < out_size; ++i) {
    const double centre = (i + 0.5) * scale;
    // Window ends rounded by truncation of (value + 0.5), as PIL does (both are >= -0.5 here).
    int32_t lo = static_cast<int32_t>(centre - support + 0.5);
    if (lo < 0) lo = 0;
    int32_t hi = static_cast<int32_t>(centre + support + 0.5);
    if (hi > in_size) hi = in_size;
    const int32_t n = hi - lo;
    w.assign(n > 0 ? n : 0, 0.0);
    double sum = 0.0;
    for (int32_t k = 0; k < n; ++k) {
      w[k] = bicubic_kernel((k + lo - centre + 0.5) * inv_stretch);
      sum += w[k];
    }
    Taps& t = out[i];
    t.first = lo;
    t.count = n > 0 ? n : 0;
    t.weights.resize(t.count);
    for (int32_t k = 0; k < t.count; ++k) {
      const double x = sum != 0.0 ? w[k] / sum : w[k];
      const double fixed = x * (1 << kFracBits);
      t.weights[k] = static_cast<int32_t>(x < 0 ? fixed - 0.5 : fixed + 0.5);
    }
  }
  return out;
}

uint8_t clip_shift(int32_t acc) {
  const int32_t v = acc >> kFracBits;  // arithmetic shift: floor for negative sums
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

}  // namespace

double bicubic_kernel(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

Image resize_bicubic(const Image& in, int32_t width, int32_t height) {
  DSV4_CHECK(width >= 1 && height >= 1 && in.width >= 1 && in.height >= 1);
  const std::vector<Taps> vt = axis_taps(in.height, height);
  // Only the input rows the vertical pass reads go through the horizontal pass (PIL does the same; the
  // result does not depend on it).
  const int32_t row0 = vt.front().first;
  const int32_t row1 = vt.back().first + vt.back().count;

  // Horizontal pass: u8 [row1 - row0, width, 3].
  Image mid;
  const Image* src = &in;
  int32_t src_row0 = 0;
  if (width != in.width) {
    const std::vector<Taps> ht = axis_taps(in.width, width);
    mid.width = width;
    mid.height = row1 - row0;
    mid.rgb.resize(static_cast<size_t>(mid.width) * mid.height * 3);
    for (int32_t y = 0; y < mid.height; ++y) {
      const uint8_t* row = &in.rgb[static_cast<size_t>(y + row0) * in.width * 3];
      uint8_t* out = &mid.rgb[static_cast<size_t>(y) * width * 3];
      for (int32_t x = 0; x < width; ++x) {
        const Taps& t = ht[x];
        int32_t acc[3] = {1 << (kFracBits - 1), 1 << (kFracBits - 1), 1 << (kFracBits - 1)};
        for (int32_t k = 0; k < t.count; ++k) {
          const uint8_t* p = row + static_cast<size_t>(t.first + k) * 3;
          for (int c = 0; c < 3; ++c) acc[c] += p[c] * t.weights[k];
        }
        for (int c = 0; c < 3; ++c) out[3 * x + c] = clip_shift(acc[c]);
      }
    }
    src = &mid;
    src_row0 = row0;
  }
  if (height == in.height) {
    if (src == &in) return in;
    return mid;  // row0 == 0 and row1 == height when the height is unchanged
  }

  // Vertical pass.
  Image out;
  out.width = width;
  out.height = height;
  out.rgb.resize(static_cast<size_t>(width) * height * 3);
  const size_t stride = static_cast<size_t>(src->width) * 3;
  for (int32_t y = 0; y < height; ++y) {
    const Taps& t = vt[y];
    uint8_t* dst = &out.rgb[static_cast<size_t>(y) * width * 3];
    for (int32_t x = 0; x < width * 3; ++x) {
      int32_t acc = 1 << (kFracBits - 1);
      for (int32_t k = 0; k < t.count; ++k) acc += src->rgb[static_cast<size_t>(t.first + k - src_row0) * stride + x] * t.weights[k];
      dst[x] = clip_shift(acc);
    }
  }
  return out;
}

}  // namespace dsv4::vision
