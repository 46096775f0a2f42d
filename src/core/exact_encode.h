// Exact encoders from the oracle's decoded values back to a release checkpoint's stored bytes: each
// checks that decoding its bytes as load_weights does gives every value back bit for bit, and
// otherwise names the first element that its file dtype cannot hold.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace dsv4 {

// BF16 (2 bytes each, little-endian) or F32 (4 bytes) values; other dtypes are refused.
StatusOr<std::vector<uint8_t>> encode_floats(std::span<const float> v, DType dtype);

// e4m3 codes of e4m3 values (F8_E4M3).
StatusOr<std::vector<uint8_t>> encode_e4m3(std::span<const float> v);

// UE8M0 bytes of power-of-two scales 2^k, -127 <= k <= 127 (F8_E8M0).
StatusOr<std::vector<uint8_t>> encode_ue8m0(std::span<const float> scales);

// Packed e2m1 pairs (I8, element 2c in the low nibble of byte c) of e2m1 values; v.size() even.
StatusOr<std::vector<uint8_t>> encode_e2m1_pairs(std::span<const float> v);

// An FP8 linear stored from its dequantized values: e4m3 codes [out, in] and UE8M0 scales
// [ceil(out/block), ceil(in/block)] such that bf16(e4m3 * 2^s) is `dense` again (load_weights'
// decode of attn.wo_a). Each tile takes the smallest scale that fits its largest value into e4m3,
// which loses no bit of a value that some scale represents exactly.
struct Fp8Bytes {
  std::vector<uint8_t> codes, scales;
};
StatusOr<Fp8Bytes> encode_fp8_tiles(std::span<const float> dense, int64_t out, int64_t in, int block);

}  // namespace dsv4
