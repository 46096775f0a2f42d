// One EXL3-quantized linear layer held on the host: its stored tensors, dense decode and CPU matmul.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "formats/exl3/codebook.h"
#include "formats/exl3/words.h"

namespace dsv4::exl3 {

// The stored tensors of one EXL3 linear, W [in, out] with y = x·W (EXL3's orientation).
struct Linear {
  std::string name;             // module key, e.g. "layers.3.ffn.experts.17.w2"
  int64_t in_features = 0;      // K, a multiple of 128
  int64_t out_features = 0;     // N, a multiple of 128
  int bits = 0;                 // bits per weight, 1..8 (trellis.shape[-1] / 16)
  Codebook codebook = Codebook::inst3;
  Words trellis;                  // i16 [in/16, out/16, 16·bits], held or borrowed from a mapped pack
  std::vector<uint16_t> suh;      // f16 [in]
  std::vector<uint16_t> svh;      // f16 [out]
  std::vector<uint16_t> bias;     // f16 [out] or empty
};

// Checks shapes, bit width and 128-divisibility; the error names the layer.
Status validate(const Linear& layer);

// The decoded trellis Wq as fp16 bits, [in, out] (bit-exact to the reference decoder).
std::vector<uint16_t> decode_wq(const Linear& layer);

// Output columns [16·nt0, 16·nt1) of Wq as fp16 bits, transposed: out[(n - 16·nt0) * in + k] (one column
// per row, what a row-by-row dot product reads); decodes only those tiles.
void decode_wq_columns(const Linear& layer, int64_t nt0, int64_t nt1, uint16_t* out);

// Dense W = diag(suh)·H_K·Wq·H_N·diag(svh), [in, out], evaluated exactly in double (the Hadamard
// butterflies on fp16 values are exact) and rounded once to fp32.
std::vector<float> dense_weight(const Linear& layer);

// y[rows, out] = x[rows, in]·W via the rotated path ((x∘suh)·H_K)·Wq·H_N∘svh + bias, accumulating
// in Acc (float or double). Each output row depends only on its own input row.
template <typename Acc>
void matmul(const Linear& layer, const std::vector<uint16_t>& wq, const float* x, int64_t rows,
            float* y);

}  // namespace dsv4::exl3
