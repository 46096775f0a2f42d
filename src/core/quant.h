// The in-model block quantizers of the V4 family (model-spec.md §3.1/§4.3, formats.md §3.6).
//
// Three rules, each a per-block scale choice from the block's fp32 amax plus an element rounding:
//   (a) FP8 e4m3 / UE8M0 scale: s = pow2ceil(fl32(max(amax, 1e-4) * fl32(1/448))),
//       q = e4m3_rne(clamp(x/s, +-448)). V4.1: block 32 (activations, window KV). V4/0731:
//       block 128 for activations and 64 over the 448 non-RoPE dims of window/compressed KV.
//   (b) FP4 e2m1 / UE8M0 scale: s = pow2ceil(fl32(max(amax, 6*2^-126) * fl32(1/6))),
//       c = e2m1_rne(clamp(x/s, +-6)). Block 32 (index keys and queries).
//   (c) FP4 e2m1 / E4M3 scale: s = e4m3_rne(max(amax, 6*2^-9) / 6), c = e2m1_rne(clamp(x/s, +-6))
//       with IEEE fp32 division by the decoded s. Block 16 (compressed main KV of V4.1).
// Inputs are bf16-representable fp32 values (the reference quantizes bf16 tensors only) and must be
// finite. Dequantized values code*scale are exact in fp32 and in bf16, so a QDQ ("fake quant")
// result equals the reference's bf16 cache contents. A block may be partial at the end of the span.
// FP4 codes are packed two per byte, even element in the low nibble (so n and the block are even).
#pragma once

#include <cstdint>
#include <span>

#include "core/fp4.h"
#include "core/fp8.h"
#include "core/ue8m0.h"

namespace dsv4 {

inline constexpr float kFp8AmaxFloor = 1e-4f;                     // 0x38D1B717
inline constexpr float kInv448 = 1.0f / 448.0f;                   // fl32(1/448) = 0x3B124925
inline constexpr float kInv6 = 1.0f / 6.0f;                       // fl32(1/6) = 0x3E2AAAAB
inline constexpr float kFp4Ue8m0AmaxFloor = 6.0f * 0x1p-126f;     // smallest s is 2^-126
inline constexpr float kFp4E4m3AmaxFloor = 6.0f * 0x1p-9f;        // smallest s is e4m3 0x01

inline constexpr int kV41QuantBlock = 32;   // rule (a) and (b) block in V4.1
inline constexpr int kFp4E4m3Block = 16;    // rule (c) block
inline constexpr int kV4ActBlock = 128;     // V4/0731 activation block for rule (a)
inline constexpr int kV4KvBlock = 64;       // V4/0731 KV block for rule (a)
inline constexpr int kV4KvNopeDims = 448;   // V4/0731 KV: only these leading dims are quantized

// Rule (a) scale as its UE8M0 byte (log2(s) + 127). All-zero block -> 105 (2^-22).
DSV4_HD inline uint8_t fp8_ue8m0_scale(float amax) {
  const float a = amax > kFp8AmaxFloor ? amax : kFp8AmaxFloor;
  return ue8m0_from_log2(ceil_log2_f32(a * kInv448));
}

// Rule (b) scale as its UE8M0 byte. All-zero block -> 1 (2^-126).
DSV4_HD inline uint8_t fp4_ue8m0_scale(float amax) {
  const float a = amax > kFp4Ue8m0AmaxFloor ? amax : kFp4Ue8m0AmaxFloor;
  return ue8m0_from_log2(ceil_log2_f32(a * kInv6));
}

// Rule (c) scale as its e4m3 code. All-zero block -> 0x01 (2^-9).
DSV4_HD inline uint8_t fp4_e4m3_scale(float amax) {
  const float a = amax > kFp4E4m3AmaxFloor ? amax : kFp4E4m3AmaxFloor;
  return f32_to_e4m3(a / 6.0f);
}

// Element roundings given the decoded scale s. For power-of-two s, x * (1/s) equals x / s.
DSV4_HD inline uint8_t fp8_ue8m0_code(float x, float inv_s) { return f32_to_e4m3(x * inv_s); }
DSV4_HD inline uint8_t fp4_ue8m0_code(float x, float inv_s) { return f32_to_e2m1(x * inv_s); }
DSV4_HD inline uint8_t fp4_e4m3_code(float x, float s) { return f32_to_e2m1(x / s); }

// max |x| over the span in fp32 (NaN ignored; inputs are finite by contract).
float block_amax(std::span<const float> x);

// Rule (a). codes [n] e4m3, scales [ceil(n/block)] UE8M0.
void quant_fp8_ue8m0(std::span<const float> x, int block, std::span<uint8_t> codes,
                     std::span<uint8_t> scales);
void dequant_fp8_ue8m0(std::span<const uint8_t> codes, std::span<const uint8_t> scales, int block,
                       std::span<float> out);
// out may alias x.
void qdq_fp8_ue8m0(std::span<const float> x, int block, std::span<float> out);

// Rule (b). packed [n/2] e2m1 pairs, scales [ceil(n/block)] UE8M0.
void quant_fp4_ue8m0(std::span<const float> x, int block, std::span<uint8_t> packed,
                     std::span<uint8_t> scales);
void dequant_fp4_ue8m0(std::span<const uint8_t> packed, std::span<const uint8_t> scales, int block,
                       std::span<float> out);
void qdq_fp4_ue8m0(std::span<const float> x, int block, std::span<float> out);

// Rule (c). packed [n/2] e2m1 pairs, scales [ceil(n/block)] e4m3.
void quant_fp4_e4m3(std::span<const float> x, int block, std::span<uint8_t> packed,
                    std::span<uint8_t> scales);
void dequant_fp4_e4m3(std::span<const uint8_t> packed, std::span<const uint8_t> scales, int block,
                      std::span<float> out);
void qdq_fp4_e4m3(std::span<const float> x, int block, std::span<float> out);

// V4/0731 KV row QDQ in place: rule (a) with block 64 over dims [0, 448); the RoPE tail stays as
// is (bf16). row.size() >= 448.
void qdq_v4_kv_row(std::span<float> row);

// 2-D weight blocks (release FP8 weights: 32x32 in V4.1, 128x128 in V4): rule (a) with the amax
// taken over each block x block tile. The release's own weight quantizer is not public; this is
// the activation rule applied per tile, which yields valid, non-overflowing UE8M0 scales.
// w fp32 [rows, cols] -> codes e4m3 [rows, cols], scales UE8M0 [ceil(rows/B), ceil(cols/B)].
void quant_fp8_weight(std::span<const float> w, int64_t rows, int64_t cols, int block,
                      std::span<uint8_t> codes, std::span<uint8_t> scales);
// W[o][i] = e4m3(codes[o][i]) * 2^(scales[o/B][i/B] - 127) (formats.md §2.3).
void dequant_fp8_weight(std::span<const uint8_t> codes, std::span<const uint8_t> scales,
                        int64_t rows, int64_t cols, int block, std::span<float> out);

}  // namespace dsv4
