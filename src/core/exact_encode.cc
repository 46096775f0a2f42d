// Exact release encoders with a round-trip check per element (see exact_encode.h).
#include "core/exact_encode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "core/bf16.h"
#include "core/fp4.h"
#include "core/fp8.h"
#include "core/ue8m0.h"

namespace dsv4 {
namespace {

// Bitwise equality: -0 differs from +0, as a decode would show.
bool same(float a, float b) { return f32_bits(a) == f32_bits(b); }

Status not_exact(const char* format, size_t i, float v) {
  return error(StatusCode::invalid_argument, "element {} = {:.9g} has no exact {} encoding", i, v, format);
}

std::optional<uint8_t> ue8m0_of(float s) {
  const uint32_t u = f32_bits(s);
  if (u == 0x00400000u) return uint8_t{0};  // 2^-127, the one subnormal scale
  const uint32_t e = (u >> 23) & 0xFFu;
  if ((u & 0x807FFFFFu) != 0 || e == 0 || e == 0xFF) return std::nullopt;
  return static_cast<uint8_t>(e);
}

}  // namespace

StatusOr<std::vector<uint8_t>> encode_floats(std::span<const float> v, DType dtype) {
  if (dtype == DType::f32) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  }
  if (dtype != DType::bf16)
    return error(StatusCode::invalid_argument, "float values cannot be stored as {}", dtype_name(dtype));
  std::vector<uint8_t> b(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = f32_to_bf16(v[i]);
    if (!same(bf16_to_f32(h), v[i])) return not_exact("bf16", i, v[i]);
    std::memcpy(b.data() + 2 * i, &h, 2);
  }
  return b;
}

StatusOr<std::vector<uint8_t>> encode_e4m3(std::span<const float> v) {
  std::vector<uint8_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    b[i] = f32_to_e4m3(v[i]);
    if (!same(e4m3_to_f32(b[i]), v[i])) return not_exact("e4m3", i, v[i]);
  }
  return b;
}

StatusOr<std::vector<uint8_t>> encode_ue8m0(std::span<const float> scales) {
  std::vector<uint8_t> b(scales.size());
  for (size_t i = 0; i < scales.size(); ++i) {
    const auto e = ue8m0_of(scales[i]);
    if (!e) return not_exact("ue8m0 (power of two)", i, scales[i]);
    b[i] = *e;
  }
  return b;
}

StatusOr<std::vector<uint8_t>> encode_e2m1_pairs(std::span<const float> v) {
  if (v.size() % 2) return error(StatusCode::invalid_argument, "an odd number of e2m1 values ({})", v.size());
  std::vector<uint8_t> b(v.size() / 2);
  for (size_t i = 0; i < v.size(); i += 2) {
    const uint8_t lo = f32_to_e2m1(v[i]), hi = f32_to_e2m1(v[i + 1]);
    if (!same(e2m1_to_f32(lo), v[i])) return not_exact("e2m1", i, v[i]);
    if (!same(e2m1_to_f32(hi), v[i + 1])) return not_exact("e2m1", i + 1, v[i + 1]);
    b[i / 2] = pack_e2m1_pair(lo, hi);
  }
  return b;
}

StatusOr<Fp8Bytes> encode_fp8_tiles(std::span<const float> dense, int64_t out, int64_t in, int block) {
  const int64_t B = block, tr = (out + B - 1) / B, tc = (in + B - 1) / B;
  if (static_cast<int64_t>(dense.size()) != out * in)
    return error(StatusCode::invalid_argument, "{} values for a [{}, {}] linear", dense.size(), out, in);
  Fp8Bytes r;
  r.codes.resize(static_cast<size_t>(out * in));
  r.scales.resize(static_cast<size_t>(tr * tc));
  for (int64_t bi = 0; bi < tr; ++bi)
    for (int64_t bj = 0; bj < tc; ++bj) {
      const int64_t n1 = std::min(out, (bi + 1) * B), k1 = std::min(in, (bj + 1) * B);
      float amax = 0;
      for (int64_t n = bi * B; n < n1; ++n)
        for (int64_t k = bj * B; k < k1; ++k) amax = std::max(amax, std::fabs(dense[n * in + k]));
      // The smallest 2^s with amax / 2^s <= 448 (any scale for an all-zero tile: 2^0).
      int s = 0;
      if (amax > 0) {
        s = std::ilogb(amax) - 9;
        while (std::ldexp(448.0, s) < amax) ++s;
      }
      if (s < -127 || s > 127)
        return error(StatusCode::invalid_argument, "tile ({}, {}): scale 2^{} is outside ue8m0", bi, bj, s);
      r.scales[bi * tc + bj] = ue8m0_from_log2(s);
      const float scale = ue8m0_to_f32(r.scales[bi * tc + bj]);
      for (int64_t n = bi * B; n < n1; ++n)
        for (int64_t k = bj * B; k < k1; ++k) {
          const float v = dense[n * in + k];
          const uint8_t c = f32_to_e4m3(static_cast<float>(std::ldexp(static_cast<double>(v), -s)));
          if (!same(round_bf16(e4m3_to_f32(c) * scale), v))
            return not_exact("e4m3 x 2^k (FP8 tile)", static_cast<size_t>(n * in + k), v);
          r.codes[n * in + k] = c;
        }
    }
  return r;
}

}  // namespace dsv4
