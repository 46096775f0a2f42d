// Packed per-token cache rows (model-spec.md §4.2): window / FP8 compressed rows (d B e4m3 +
// d/32 B ue8m0), FP4 compressed rows (d/2 B e2m1 + d/16 B e4m3 scales), index-key rows
// (d/2 B e2m1 + d/32 B ue8m0); V4 window / compressed rows (d-rd B e4m3 + (d-rd)/64 B ue8m0 +
// rd bf16 RoPE dims + 1 pad B: the 584 B "MODEL1" row at d = 512); plain bf16 rows (test-only
// unquantized mode). Packing a bf16 row QDQs it; unpacking returns the exact values.
#pragma once

#include <cstdint>

#include "backends/cpu/numerics.h"
#include "core/kv_rows.h"

namespace dsv4::cpu {

// Quantizes x [d] (bf16 values) into `out`; FP4 pairs keep the even element in the low nibble.
inline void pack_row(KvRowFormat f, const float* x, int64_t d, uint8_t* out, int64_t rd = 64) {
  uint8_t codes[64];
  switch (f) {
    case KvRowFormat::model1: {
      const int64_t n = d - rd;
      for (int64_t g = 0; g < n / 64; ++g) out[n + g] = quant_fp8_group(x + g * 64, 64, out + g * 64);
      uint8_t* tail = out + n + n / 64;
      for (int64_t i = 0; i < rd; ++i) {
        const bf16_t b = to_bf16(x[n + i]);
        tail[2 * i] = static_cast<uint8_t>(b & 0xff);
        tail[2 * i + 1] = static_cast<uint8_t>(b >> 8);
      }
      tail[2 * rd] = 0;
      return;
    }
    case KvRowFormat::bf16:
      for (int64_t i = 0; i < d; ++i) {
        const bf16_t b = to_bf16(x[i]);
        out[2 * i] = static_cast<uint8_t>(b & 0xff);
        out[2 * i + 1] = static_cast<uint8_t>(b >> 8);
      }
      return;
    case KvRowFormat::fp8_ue8m0_32:
      for (int64_t g = 0; g < d / 32; ++g) out[d + g] = quant_fp8_group(x + g * 32, 32, out + g * 32);
      return;
    case KvRowFormat::fp4_e4m3_16:
      for (int64_t g = 0; g < d / 16; ++g) {
        out[d / 2 + g] = quant_fp4_e4m3_group(x + g * 16, 16, codes);
        for (int i = 0; i < 8; ++i) out[g * 8 + i] = codes[2 * i] | (codes[2 * i + 1] << 4);
      }
      return;
    case KvRowFormat::fp4_ue8m0_32:
      for (int64_t g = 0; g < d / 32; ++g) {
        out[d / 2 + g] = quant_fp4_ue8m0_group(x + g * 32, 32, codes);
        for (int i = 0; i < 16; ++i) out[g * 16 + i] = codes[2 * i] | (codes[2 * i + 1] << 4);
      }
      return;
  }
}

// The dequantized bf16 values of a packed row.
inline void unpack_row(KvRowFormat f, const uint8_t* in, int64_t d, float* x, int64_t rd = 64) {
  switch (f) {
    case KvRowFormat::model1: {
      const int64_t n = d - rd;
      for (int64_t i = 0; i < n; ++i) x[i] = e4m3_to_f32(in[i]) * ue8m0_to_f32(in[n + i / 64]);
      const uint8_t* tail = in + n + n / 64;
      for (int64_t i = 0; i < rd; ++i) x[n + i] = bf16_to_f32(static_cast<bf16_t>(tail[2 * i] | (tail[2 * i + 1] << 8)));
      return;
    }
    case KvRowFormat::bf16:
      for (int64_t i = 0; i < d; ++i) x[i] = bf16_to_f32(static_cast<bf16_t>(in[2 * i] | (in[2 * i + 1] << 8)));
      return;
    case KvRowFormat::fp8_ue8m0_32:
      for (int64_t i = 0; i < d; ++i) x[i] = e4m3_to_f32(in[i]) * ue8m0_to_f32(in[d + i / 32]);
      return;
    case KvRowFormat::fp4_e4m3_16:
      for (int64_t i = 0; i < d; ++i)
        x[i] = e2m1_to_f32((in[i / 2] >> (4 * (i & 1))) & 15) * e4m3_to_f32(in[d / 2 + i / 16]);
      return;
    case KvRowFormat::fp4_ue8m0_32:
      for (int64_t i = 0; i < d; ++i)
        x[i] = e2m1_to_f32((in[i / 2] >> (4 * (i & 1))) & 15) * ue8m0_to_f32(in[d / 2 + i / 32]);
      return;
  }
}

// In-place QDQ of a bf16 row under format f (pack then unpack).
inline void qdq_row(KvRowFormat f, float* x, int64_t d, int64_t rd = 64) {
  uint8_t buf[8192];
  pack_row(f, x, d, buf, rd);
  unpack_row(f, buf, d, x, rd);
}

}  // namespace dsv4::cpu
