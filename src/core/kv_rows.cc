// Pack and unpack of the 528 / 288 / 68 / 584-byte KV rows through the block quantizers.
#include "core/kv_rows.h"

#include <array>

#include "core/bf16.h"
#include "core/quant.h"
#include "core/status.h"

namespace dsv4 {
namespace {

template <size_t N>
std::array<float, N> widen(std::span<const uint16_t> x_bf16) {
  DSV4_CHECK(x_bf16.size() == N);
  std::array<float, N> x;
  for (size_t i = 0; i < N; ++i) x[i] = bf16_to_f32(x_bf16[i]);
  return x;
}

constexpr int kModel1Nope = kKvDim - kKvRopeDim;  // 448

}  // namespace

void pack_kv_fp8_row(std::span<const float> x, std::span<uint8_t> row) {
  DSV4_CHECK(x.size() == static_cast<size_t>(kKvDim) && row.size() == kKvFp8RowBytes);
  quant_fp8_ue8m0(x, kV41QuantBlock, row.first(kKvFp8ScaleOffset), row.subspan(kKvFp8ScaleOffset));
}
void pack_kv_fp8_row(std::span<const uint16_t> x_bf16, std::span<uint8_t> row) {
  pack_kv_fp8_row(widen<kKvDim>(x_bf16), row);
}
void unpack_kv_fp8_row(std::span<const uint8_t> row, std::span<float> x) {
  DSV4_CHECK(x.size() == static_cast<size_t>(kKvDim) && row.size() == kKvFp8RowBytes);
  dequant_fp8_ue8m0(row.first(kKvFp8ScaleOffset), row.subspan(kKvFp8ScaleOffset), kV41QuantBlock, x);
}

void pack_kv_fp4_row(std::span<const float> x, std::span<uint8_t> row) {
  DSV4_CHECK(x.size() == static_cast<size_t>(kKvDim) && row.size() == kKvFp4RowBytes);
  quant_fp4_e4m3(x, kFp4E4m3Block, row.first(kKvFp4ScaleOffset), row.subspan(kKvFp4ScaleOffset));
}
void pack_kv_fp4_row(std::span<const uint16_t> x_bf16, std::span<uint8_t> row) {
  pack_kv_fp4_row(widen<kKvDim>(x_bf16), row);
}
void unpack_kv_fp4_row(std::span<const uint8_t> row, std::span<float> x) {
  DSV4_CHECK(x.size() == static_cast<size_t>(kKvDim) && row.size() == kKvFp4RowBytes);
  dequant_fp4_e4m3(row.first(kKvFp4ScaleOffset), row.subspan(kKvFp4ScaleOffset), kFp4E4m3Block, x);
}

void pack_index_key_row(std::span<const float> x, std::span<uint8_t> row) {
  DSV4_CHECK(x.size() == static_cast<size_t>(kIndexKeyDim) && row.size() == kIndexKeyRowBytes);
  quant_fp4_ue8m0(x, kV41QuantBlock, row.first(kIndexKeyScaleOffset),
                  row.subspan(kIndexKeyScaleOffset));
}
void pack_index_key_row(std::span<const uint16_t> x_bf16, std::span<uint8_t> row) {
  pack_index_key_row(widen<kIndexKeyDim>(x_bf16), row);
}
void unpack_index_key_row(std::span<const uint8_t> row, std::span<float> x) {
  DSV4_CHECK(x.size() == static_cast<size_t>(kIndexKeyDim) && row.size() == kIndexKeyRowBytes);
  dequant_fp4_ue8m0(row.first(kIndexKeyScaleOffset), row.subspan(kIndexKeyScaleOffset),
                    kV41QuantBlock, x);
}

void pack_kv_model1_row(std::span<const float> x, std::span<uint8_t> row) {
  DSV4_CHECK(x.size() == static_cast<size_t>(kKvDim) && row.size() == kKvModel1RowBytes);
  quant_fp8_ue8m0(x.first(kModel1Nope), kV4KvBlock, row.first(kKvModel1RopeOffset),
                  row.subspan(kKvModel1ScaleOffset, kModel1Nope / kV4KvBlock));
  for (int i = 0; i < kKvRopeDim; ++i) {
    const uint16_t b = f32_to_bf16(x[kModel1Nope + i]);
    row[kKvModel1RopeOffset + 2 * i] = static_cast<uint8_t>(b & 0xFF);
    row[kKvModel1RopeOffset + 2 * i + 1] = static_cast<uint8_t>(b >> 8);
  }
  row[kKvModel1RowBytes - 1] = 0;
}
void pack_kv_model1_row(std::span<const uint16_t> x_bf16, std::span<uint8_t> row) {
  pack_kv_model1_row(widen<kKvDim>(x_bf16), row);
}
void unpack_kv_model1_row(std::span<const uint8_t> row, std::span<float> x) {
  DSV4_CHECK(x.size() == static_cast<size_t>(kKvDim) && row.size() == kKvModel1RowBytes);
  dequant_fp8_ue8m0(row.first(kKvModel1RopeOffset),
                    row.subspan(kKvModel1ScaleOffset, kModel1Nope / kV4KvBlock), kV4KvBlock,
                    x.first(kModel1Nope));
  for (int i = 0; i < kKvRopeDim; ++i) {
    const uint16_t b = static_cast<uint16_t>(row[kKvModel1RopeOffset + 2 * i] |
                                             (row[kKvModel1RopeOffset + 2 * i + 1] << 8));
    x[kModel1Nope + i] = bf16_to_f32(b);
  }
}

}  // namespace dsv4
