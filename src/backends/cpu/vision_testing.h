// Test support for the vision tower: the test images of tests/reference/vision/vision_ref.py (the same bits, ported)
// and a reader of the rank-2 float32 .npy files that harness writes.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "backends/cpu/numerics.h"
#include "core/status.h"

namespace dsv4::cpu::vision_testing {

// vision_ref.py image_patches(seed, gh, gw, p): pixels (2x + 3y + 80c + ((h >> 27) & 31)) mod 256 with
// h = (7919c + 104729y + 1299709x + 15485863·seed)·2654435761 mod 2^64, normalized (x/255 - 0.5)/0.5 in fp32,
// rounded to bf16, cut into patches (patch (i, j) at row i·gw + j, element c·p² + y·p + x); f32 [gh·gw, 3p²].
inline std::vector<float> gradient_image_patches(uint64_t seed, int64_t gh, int64_t gw, int64_t p) {
  std::vector<float> out(static_cast<size_t>(gh * gw * 3 * p * p));
  for (int64_t i = 0; i < gh; ++i)
    for (int64_t j = 0; j < gw; ++j)
      for (uint64_t c = 0; c < 3; ++c)
        for (int64_t yy = 0; yy < p; ++yy)
          for (int64_t xx = 0; xx < p; ++xx) {
            const uint64_t y = static_cast<uint64_t>(i * p + yy), x = static_cast<uint64_t>(j * p + xx);
            const uint64_t h = (7919 * c + 104729 * y + 1299709 * x + 15485863 * seed) * 2654435761ull;
            const uint64_t pixel = (2 * x + 3 * y + 80 * c + ((h >> 27) & 31)) % 256;
            const float v = static_cast<float>(pixel) / 255.0f;
            out[((i * gw + j) * 3 + c) * p * p + yy * p + xx] = round_bf16((v - 0.5f) / 0.5f);
          }
  return out;
}

// A little-endian float32 C-order .npy of rank 2 (format 1.0-3.0): its values; rows and cols set.
inline StatusOr<std::vector<float>> read_npy_f32(const std::string& path, int64_t& rows, int64_t& cols) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return error(StatusCode::not_found, "{}: cannot open", path);
  const std::string bytes((std::istreambuf_iterator<char>(f)), {});
  if (bytes.size() < 12 || bytes.compare(0, 6, "\x93NUMPY") != 0)
    return error(StatusCode::invalid_argument, "{}: not a .npy file", path);
  const auto byte = [&](size_t i) { return static_cast<size_t>(static_cast<unsigned char>(bytes[i])); };
  const bool v1 = byte(6) == 1;
  const size_t hlen = v1 ? byte(8) | byte(9) << 8 : byte(8) | byte(9) << 8 | byte(10) << 16 | byte(11) << 24;
  const size_t at = v1 ? 10 : 12;
  const std::string header = bytes.substr(at, hlen);
  if (header.find("'descr': '<f4'") == std::string::npos || header.find("'fortran_order': False") == std::string::npos)
    return error(StatusCode::invalid_argument, "{}: needs little-endian float32 in C order, header {}", path, header);
  const size_t s = header.find("'shape': (");
  long r = 0, c = 0;
  if (s == std::string::npos || std::sscanf(header.c_str() + s, "'shape': (%ld, %ld)", &r, &c) != 2 || r < 0 || c < 0)
    return error(StatusCode::invalid_argument, "{}: needs a rank-2 shape, header {}", path, header);
  rows = r;
  cols = c;
  const size_t data = at + hlen, want = static_cast<size_t>(rows * cols) * 4;
  if (bytes.size() != data + want)
    return error(StatusCode::invalid_argument, "{}: {} data bytes for shape ({}, {})", path, bytes.size() - data, rows,
                 cols);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  std::memcpy(v.data(), bytes.data() + data, want);
  return v;
}

}  // namespace dsv4::cpu::vision_testing
