// Block quantizers: rules (a), (b), (c) over spans, the V4 KV row and 2-D weight tiles.
#include "core/quant.h"

#include <algorithm>

#include "core/status.h"

namespace dsv4 {
namespace {

size_t num_blocks(size_t n, int block) { return (n + static_cast<size_t>(block) - 1) / block; }

void check_shapes(size_t n, int block, size_t codes, size_t scales, bool packed) {
  DSV4_CHECK(block > 0);
  if (packed) DSV4_CHECK(block % 2 == 0 && n % 2 == 0 && codes * 2 == n);
  else DSV4_CHECK(codes == n);
  DSV4_CHECK(scales == num_blocks(n, block));
}

// 1/s for a UE8M0 byte (exact: a power of two in fp32 range). Byte 254 only arises from an
// infinite amax, outside the contract; its inverse 2^-127 is subnormal.
float inv_ue8m0(uint8_t b) {
  return b >= 254 ? f32_from_bits(0x00400000u) : pow2_f32(127 - static_cast<int>(b));
}

}  // namespace

float block_amax(std::span<const float> x) {
  float m = 0.0f;
  for (float v : x) {
    const float a = v < 0 ? -v : v;
    if (a > m) m = a;
  }
  return m;
}

void quant_fp8_ue8m0(std::span<const float> x, int block, std::span<uint8_t> codes,
                     std::span<uint8_t> scales) {
  check_shapes(x.size(), block, codes.size(), scales.size(), false);
  for (size_t b = 0, i0 = 0; i0 < x.size(); ++b, i0 += block) {
    const size_t n = std::min<size_t>(block, x.size() - i0);
    const uint8_t sb = fp8_ue8m0_scale(block_amax(x.subspan(i0, n)));
    scales[b] = sb;
    const float inv = inv_ue8m0(sb);
    for (size_t i = i0; i < i0 + n; ++i) codes[i] = fp8_ue8m0_code(x[i], inv);
  }
}

void dequant_fp8_ue8m0(std::span<const uint8_t> codes, std::span<const uint8_t> scales, int block,
                       std::span<float> out) {
  check_shapes(out.size(), block, codes.size(), scales.size(), false);
  const float* t = e4m3_table();
  for (size_t i = 0; i < out.size(); ++i) out[i] = t[codes[i]] * ue8m0_to_f32(scales[i / block]);
}

void qdq_fp8_ue8m0(std::span<const float> x, int block, std::span<float> out) {
  DSV4_CHECK(block > 0 && x.size() == out.size());
  const float* t = e4m3_table();
  for (size_t i0 = 0; i0 < x.size(); i0 += block) {
    const size_t n = std::min<size_t>(block, x.size() - i0);
    const uint8_t sb = fp8_ue8m0_scale(block_amax(x.subspan(i0, n)));
    const float s = ue8m0_to_f32(sb), inv = inv_ue8m0(sb);
    for (size_t i = i0; i < i0 + n; ++i) out[i] = t[fp8_ue8m0_code(x[i], inv)] * s;
  }
}

void quant_fp4_ue8m0(std::span<const float> x, int block, std::span<uint8_t> packed,
                     std::span<uint8_t> scales) {
  check_shapes(x.size(), block, packed.size(), scales.size(), true);
  for (size_t b = 0, i0 = 0; i0 < x.size(); ++b, i0 += block) {
    const size_t n = std::min<size_t>(block, x.size() - i0);
    const uint8_t sb = fp4_ue8m0_scale(block_amax(x.subspan(i0, n)));
    scales[b] = sb;
    const float inv = inv_ue8m0(sb);
    for (size_t i = i0; i < i0 + n; i += 2)
      packed[i / 2] = pack_e2m1_pair(fp4_ue8m0_code(x[i], inv), fp4_ue8m0_code(x[i + 1], inv));
  }
}

void dequant_fp4_ue8m0(std::span<const uint8_t> packed, std::span<const uint8_t> scales, int block,
                       std::span<float> out) {
  check_shapes(out.size(), block, packed.size(), scales.size(), true);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = e2m1_to_f32(e2m1_nibble(packed[i / 2], i & 1)) * ue8m0_to_f32(scales[i / block]);
}

void qdq_fp4_ue8m0(std::span<const float> x, int block, std::span<float> out) {
  DSV4_CHECK(block > 0 && x.size() == out.size());
  for (size_t i0 = 0; i0 < x.size(); i0 += block) {
    const size_t n = std::min<size_t>(block, x.size() - i0);
    const uint8_t sb = fp4_ue8m0_scale(block_amax(x.subspan(i0, n)));
    const float s = ue8m0_to_f32(sb), inv = inv_ue8m0(sb);
    for (size_t i = i0; i < i0 + n; ++i) out[i] = e2m1_to_f32(fp4_ue8m0_code(x[i], inv)) * s;
  }
}

void quant_fp4_e4m3(std::span<const float> x, int block, std::span<uint8_t> packed,
                    std::span<uint8_t> scales) {
  check_shapes(x.size(), block, packed.size(), scales.size(), true);
  for (size_t b = 0, i0 = 0; i0 < x.size(); ++b, i0 += block) {
    const size_t n = std::min<size_t>(block, x.size() - i0);
    const uint8_t sc = fp4_e4m3_scale(block_amax(x.subspan(i0, n)));
    scales[b] = sc;
    const float s = e4m3_to_f32(sc);
    for (size_t i = i0; i < i0 + n; i += 2)
      packed[i / 2] = pack_e2m1_pair(fp4_e4m3_code(x[i], s), fp4_e4m3_code(x[i + 1], s));
  }
}

void dequant_fp4_e4m3(std::span<const uint8_t> packed, std::span<const uint8_t> scales, int block,
                      std::span<float> out) {
  check_shapes(out.size(), block, packed.size(), scales.size(), true);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = e2m1_to_f32(e2m1_nibble(packed[i / 2], i & 1)) * e4m3_to_f32(scales[i / block]);
}

void qdq_fp4_e4m3(std::span<const float> x, int block, std::span<float> out) {
  DSV4_CHECK(block > 0 && x.size() == out.size());
  for (size_t i0 = 0; i0 < x.size(); i0 += block) {
    const size_t n = std::min<size_t>(block, x.size() - i0);
    const float s = e4m3_to_f32(fp4_e4m3_scale(block_amax(x.subspan(i0, n))));
    for (size_t i = i0; i < i0 + n; ++i) out[i] = e2m1_to_f32(fp4_e4m3_code(x[i], s)) * s;
  }
}

void qdq_v4_kv_row(std::span<float> row) {
  DSV4_CHECK(row.size() >= static_cast<size_t>(kV4KvNopeDims));
  auto nope = row.first(kV4KvNopeDims);
  qdq_fp8_ue8m0(nope, kV4KvBlock, nope);
}

void quant_fp8_weight(std::span<const float> w, int64_t rows, int64_t cols, int block,
                      std::span<uint8_t> codes, std::span<uint8_t> scales) {
  DSV4_CHECK(block > 0 && rows >= 0 && cols >= 0);
  const int64_t br = (rows + block - 1) / block, bc = (cols + block - 1) / block;
  DSV4_CHECK(w.size() == static_cast<size_t>(rows * cols) && codes.size() == w.size());
  DSV4_CHECK(scales.size() == static_cast<size_t>(br * bc));
  for (int64_t tr = 0; tr < br; ++tr) {
    const int64_t r1 = std::min<int64_t>(rows, (tr + 1) * block);
    for (int64_t tc = 0; tc < bc; ++tc) {
      const int64_t c0 = tc * block, c1 = std::min<int64_t>(cols, c0 + block);
      float amax = 0.0f;
      for (int64_t r = tr * block; r < r1; ++r)
        amax = std::max(amax, block_amax(w.subspan(r * cols + c0, c1 - c0)));
      const uint8_t sb = fp8_ue8m0_scale(amax);
      scales[tr * bc + tc] = sb;
      const float inv = inv_ue8m0(sb);
      for (int64_t r = tr * block; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) codes[r * cols + c] = fp8_ue8m0_code(w[r * cols + c], inv);
    }
  }
}

void dequant_fp8_weight(std::span<const uint8_t> codes, std::span<const uint8_t> scales,
                        int64_t rows, int64_t cols, int block, std::span<float> out) {
  DSV4_CHECK(block > 0 && rows >= 0 && cols >= 0);
  const int64_t bc = (cols + block - 1) / block;
  DSV4_CHECK(out.size() == static_cast<size_t>(rows * cols) && codes.size() == out.size());
  DSV4_CHECK(scales.size() == static_cast<size_t>(((rows + block - 1) / block) * bc));
  const float* t = e4m3_table();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      out[r * cols + c] = t[codes[r * cols + c]] * ue8m0_to_f32(scales[(r / block) * bc + c / block]);
}

}  // namespace dsv4
