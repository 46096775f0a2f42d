// Stored weights as the oracle reads them: bf16 / f32 tensors widened exactly to float, e4m3 and e2m1 rows
// decoded to their values, UE8M0 scale bytes to powers of two. A few rows at a time, in each operation: the
// model's bytes stay as the checkpoint stores them (mapped files may hold them at odd addresses, so every
// multi-byte read goes through memcpy).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/numerics.h"
#include "core/tensor_view.h"

namespace dsv4::cpu {

// Activations between ops are bf16 values held exactly in float arrays.
using Vec = std::vector<float>;

// Elements [i0, i0 + n) of a BF16 or F32 tensor, widened exactly (other dtypes read as zero: the binder
// checked every dtype against the table).
inline void floats_at(const TensorView& v, int64_t i0, int64_t n, float* out) {
  if (v.dtype == DType::bf16) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t b;
      std::memcpy(&b, v.bytes() + 2 * (i0 + i), 2);
      out[i] = bf16_to_f32(b);
    }
  } else if (v.dtype == DType::f32) {
    std::memcpy(out, v.bytes() + 4 * i0, static_cast<size_t>(4 * n));
  } else {
    std::fill(out, out + n, 0.0f);
  }
}
// The whole tensor (norm weights, biases, sinks, small tables).
inline Vec floats(const TensorView& v) {
  Vec out(static_cast<size_t>(v.data ? v.numel() : 0));
  if (!out.empty()) floats_at(v, 0, static_cast<int64_t>(out.size()), out.data());
  return out;
}

// e4m3 values of n codes.
inline void e4m3_values(const uint8_t* codes, int64_t n, float* out) {
  const float* t = e4m3_table();
  for (int64_t i = 0; i < n; ++i) out[i] = t[codes[i]];
}
// 2^(s - 127) of n scale bytes.
inline void ue8m0_values(const uint8_t* s, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = ue8m0_to_f32(s[i]);
}
// e2m1 values of n elements packed two per byte (element 2c in the low nibble of byte c); n even.
inline void e2m1_values(const uint8_t* packed, int64_t n, float* out) {
  for (int64_t c = 0; c < n / 2; ++c) {
    out[2 * c] = e2m1_to_f32(packed[c] & 15);
    out[2 * c + 1] = e2m1_to_f32(packed[c] >> 4);
  }
}

}  // namespace dsv4::cpu
