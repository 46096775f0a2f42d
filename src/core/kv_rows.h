// Packed per-token KV cache rows of the production layouts (model-spec.md §4.2, §8).
//
// Every row stores exactly the reference's QDQ values: unpack(pack(x)) == qdq(x) bit for bit.
//   window / FP8 main (V4.1)  528 B: [0,512) e4m3 codes of all 512 dims (RoPE tail included),
//                                    [512,528) UE8M0 scales, one per 32 dims      rule (a)
//   compressed FP4 (V4.1)     288 B: [0,256) e2m1 pairs (even dim in the low nibble),
//                                    [256,288) e4m3 scales, one per 16 dims       rule (c)
//   index key (V4.1)           68 B: [0,64) e2m1 pairs of 128 dims,
//                                    [64,68) UE8M0 scales, one per 32 dims        rule (b)
//   MODEL1 (V4/0731)          584 B: [0,448) e4m3 codes of the non-RoPE dims, [448,576) the 64
//                                    RoPE dims as bf16 (little endian), [576,583) UE8M0 scales,
//                                    one per 64 dims, [583] zero pad              rule (a), block 64
// Inputs are bf16 values (as fp32 or as bf16 bits); unpacked outputs are fp32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace dsv4 {

inline constexpr int kKvDim = 512;       // latent width of window and compressed rows
inline constexpr int kKvRopeDim = 64;    // trailing RoPE dims
inline constexpr int kIndexKeyDim = 128; // index key width

inline constexpr size_t kKvFp8RowBytes = 528;
inline constexpr size_t kKvFp4RowBytes = 288;
inline constexpr size_t kIndexKeyRowBytes = 68;
inline constexpr size_t kKvModel1RowBytes = 584;

// Byte offsets of the scale arrays inside each row.
inline constexpr size_t kKvFp8ScaleOffset = 512;
inline constexpr size_t kKvFp4ScaleOffset = 256;
inline constexpr size_t kIndexKeyScaleOffset = 64;
inline constexpr size_t kKvModel1RopeOffset = 448;
inline constexpr size_t kKvModel1ScaleOffset = 576;

// The row formats of per-stream state as data, for sizing caches of any width (the packers below
// are the production widths d = 512, index d = 128). `rope_dim` matters only for model1: its last
// rope_dim dims stay bf16, the other d - rope_dim are e4m3 with one UE8M0 scale per 64, plus 1 pad byte.
enum class KvRowFormat : uint8_t {
  fp8_ue8m0_32,  // window rows (V4.1), FP8 compressed rows (option): d e4m3 + d/32 scales
  fp4_e4m3_16,   // compressed rows (V4.1 reference): d/2 e2m1 pairs + d/16 e4m3 scales
  fp4_ue8m0_32,  // index keys: d/2 e2m1 pairs + d/32 scales
  model1,        // V4 window and compressed rows: (d-r) e4m3 + (d-r)/64 scales + r bf16 + 1 pad
  bf16,          // plain bf16 values, 2d bytes: the CPU oracle's unquantized mode (tests)
};

constexpr int64_t kv_row_bytes(KvRowFormat f, int64_t d, int64_t rope_dim = kKvRopeDim) {
  switch (f) {
    case KvRowFormat::fp8_ue8m0_32: return d + d / 32;
    case KvRowFormat::fp4_e4m3_16: return d / 2 + d / 16;
    case KvRowFormat::fp4_ue8m0_32: return d / 2 + d / 32;
    case KvRowFormat::model1: return (d - rope_dim) + (d - rope_dim) / 64 + 2 * rope_dim + 1;
    case KvRowFormat::bf16: return 2 * d;
  }
  return 0;
}
static_assert(kv_row_bytes(KvRowFormat::fp8_ue8m0_32, kKvDim) == kKvFp8RowBytes);
static_assert(kv_row_bytes(KvRowFormat::fp4_e4m3_16, kKvDim) == kKvFp4RowBytes);
static_assert(kv_row_bytes(KvRowFormat::fp4_ue8m0_32, kIndexKeyDim) == kIndexKeyRowBytes);
static_assert(kv_row_bytes(KvRowFormat::model1, kKvDim) == kKvModel1RowBytes);

// x [512] -> row [528]; row [528] -> x [512].
void pack_kv_fp8_row(std::span<const float> x, std::span<uint8_t> row);
void pack_kv_fp8_row(std::span<const uint16_t> x_bf16, std::span<uint8_t> row);
void unpack_kv_fp8_row(std::span<const uint8_t> row, std::span<float> x);

// x [512] -> row [288]; row [288] -> x [512].
void pack_kv_fp4_row(std::span<const float> x, std::span<uint8_t> row);
void pack_kv_fp4_row(std::span<const uint16_t> x_bf16, std::span<uint8_t> row);
void unpack_kv_fp4_row(std::span<const uint8_t> row, std::span<float> x);

// x [128] -> row [68]; row [68] -> x [128].
void pack_index_key_row(std::span<const float> x, std::span<uint8_t> row);
void pack_index_key_row(std::span<const uint16_t> x_bf16, std::span<uint8_t> row);
void unpack_index_key_row(std::span<const uint8_t> row, std::span<float> x);

// x [512] -> row [584]; row [584] -> x [512] (equal to qdq_v4_kv_row(x)).
void pack_kv_model1_row(std::span<const float> x, std::span<uint8_t> row);
void pack_kv_model1_row(std::span<const uint16_t> x_bf16, std::span<uint8_t> row);
void unpack_kv_model1_row(std::span<const uint8_t> row, std::span<float> x);

}  // namespace dsv4
