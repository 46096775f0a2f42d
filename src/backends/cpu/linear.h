// The four linear kinds of model-spec.md §3.1 (FP8 block-scaled, FP4 experts, bf16, fp32) over the stored
// weights (family views), each output row decoded once per call and computed by one thread with a fixed
// summation order, templated on the accumulator. EXL3 linears of a pack stand in for any of them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backends/cpu/exl3_linear.h"
#include "backends/cpu/numerics.h"
#include "backends/cpu/stored.h"
#include "core/thread_pool.h"
#include "family/deepseek_v41/weights.h"

namespace dsv4::cpu {

using family::Fp4Linear;
using family::Fp8Linear;
using family::Matrix;

// Sum of a[i]*b[i] over n terms in a fixed order: 8 interleaved partial sums combined pairwise.
template <typename Acc>
inline Acc dot(const float* a, const float* b, int64_t n) {
  Acc l[8] = {};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (int j = 0; j < 8; ++j) l[j] += static_cast<Acc>(a[k + j]) * static_cast<Acc>(b[k + j]);
  for (int j = 0; j < 8 && k < n; ++k, ++j) l[j] += static_cast<Acc>(a[k]) * static_cast<Acc>(b[k]);  // n - k < 8 here
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

// act_quant (§3.1) of one bf16 row: e4m3 values and one pow2 scale per block. block 0 is the
// test-only unquantized mode: the row itself, scale 1 (model_config.h without_quantization).
inline void act_quant_row(const float* x, int64_t n, int block, float* xq, float* xs) {
  if (block <= 0) {
    std::copy(x, x + n, xq);
    xs[0] = 1.0f;
    return;
  }
  uint8_t codes[128];
  for (int64_t b = 0; b * block < n; ++b) {
    const int len = static_cast<int>(std::min<int64_t>(block, n - b * block));
    xs[b] = ue8m0_to_f32(quant_fp8_group(x + b * block, len, codes));
    for (int i = 0; i < len; ++i) xq[b * block + i] = e4m3_to_f32(codes[i]);
  }
}

// The QDQ'd value of a bf16 row under act_quant (window keys): bf16(q * s), exact.
inline void fp8_qdq_row(float* x, int64_t n, int block) {
  std::vector<float> xq(n), xs((n + block - 1) / block);
  act_quant_row(x, n, block, xq.data(), xs.data());
  for (int64_t i = 0; i < n; ++i) x[i] = xq[i] * xs[i / block];
}

// Row n of an FP8 weight: e4m3 values [in] (no scale) and the pow2 scales of its tile row [ceil(in/block)].
inline void fp8_weight_row(const Fp8Linear& W, int64_t n, float* w, float* ws) {
  const int64_t in = W.in(), B = W.block, sb = (in + B - 1) / B;
  e4m3_values(W.weight.bytes() + n * in, in, w);
  ue8m0_values(W.scale.bytes() + (n / B) * sb, sb, ws);
}

// Row n of a plain matrix (bf16 or f32 values) widened to float.
inline void matrix_row(const Matrix& W, int64_t n, float* w) { floats_at(W.weight, n * W.in(), W.in(), w); }

// y[rows, out] = FP8-linear(x[rows, in]): per K block, the exact e4m3 products summed, scaled by
// the activation and weight block scales, accumulated block by block in K order; -> bf16. pre (tests; not on
// EXL3 linears): the sums before that rounding [rows, out].
template <typename Acc>
void fp8_linear(ThreadPool& pool, const float* x, int64_t rows, const Fp8Linear& W, float* y, int act_block,
                Acc* pre = nullptr) {
  if (W.exl3) return exl3_linear_bf16<Acc>(pool, x, rows, *W.exl3, y);
  const int64_t in = W.in(), out = W.out(), B = W.block;
  const bool quant = act_block > 0;
  if (!quant) act_block = static_cast<int>(B);  // sum per weight block, activation scale 1
  const int64_t nb = (in + act_block - 1) / act_block;
  std::vector<float> xq(rows * in), xs(rows * nb, 1.0f);
  for (int64_t m = 0; m < rows; ++m) act_quant_row(x + m * in, in, quant ? act_block : 0, &xq[m * in], &xs[m * nb]);
  pool.parallel_for(out, [&](int64_t n0, int64_t n1) {
    Vec wr(in), ws((in + B - 1) / B);
    for (int64_t n = n0; n < n1; ++n) {
      fp8_weight_row(W, n, wr.data(), ws.data());
      for (int64_t m = 0; m < rows; ++m) {
        Acc acc = 0;
        for (int64_t kb = 0; kb < nb; ++kb) {
          const int64_t k0 = kb * act_block, len = std::min<int64_t>(act_block, in - k0);
          const Acc s = dot<Acc>(&xq[m * in + k0], wr.data() + k0, len);
          acc += s * static_cast<Acc>(xs[m * nb + kb]) * static_cast<Acc>(ws[k0 / B]);
        }
        if (pre) pre[m * out + n] = acc;
        y[m * out + n] = round_bf16(acc);
      }
    }
  }, 4);
}

// y = FP4-linear(x): e2m1 weights with a pow2 scale per 32 along K, activation act_quant'ed per
// act_block (a multiple of 32); per 32-block: exact products summed, times both scales; -> bf16.
template <typename Acc>
void fp4_linear(ThreadPool& pool, const float* x, int64_t rows, const Fp4Linear& W, float* y, int act_block) {
  if (W.exl3) return exl3_linear_bf16<Acc>(pool, x, rows, *W.exl3, y);
  const int64_t in = W.in(), out = W.out();
  const bool quant = act_block > 0;
  if (!quant) act_block = 32;  // test-only unquantized mode: activation scale 1
  const int64_t nb = (in + act_block - 1) / act_block, wb = in / 32;
  std::vector<float> xq(rows * in), xs(rows * nb, 1.0f);
  for (int64_t m = 0; m < rows; ++m) act_quant_row(x + m * in, in, quant ? act_block : 0, &xq[m * in], &xs[m * nb]);
  pool.parallel_for(out, [&](int64_t n0, int64_t n1) {
    Vec wr(in), ws(wb);
    for (int64_t n = n0; n < n1; ++n) {
      e2m1_values(W.weight.bytes() + n * (in / 2), in, wr.data());
      ue8m0_values(W.scale.bytes() + n * wb, wb, ws.data());
      for (int64_t m = 0; m < rows; ++m) {
        Acc acc = 0;
        for (int64_t kb = 0; kb < wb; ++kb) {
          const Acc s = dot<Acc>(&xq[m * in + kb * 32], wr.data() + kb * 32, 32);
          acc += s * static_cast<Acc>(xs[m * nb + kb * 32 / act_block]) * static_cast<Acc>(ws[kb]);
        }
        y[m * out + n] = round_bf16(acc);
      }
    }
  }, 4);
}

// y = bf16-linear(x) (+ bias): bf16 inputs and weights, Acc accumulation, the bias (bf16 values [out], or none)
// added in Acc before the one rounding -> bf16 (torch's bf16 addmm). Weight rows are decoded 32 at a time and
// reused over every input row. EXL3 linears carry no bias here (none of the model's has one).
template <typename Acc>
void bf16_linear(ThreadPool& pool, const float* x, int64_t rows, const Matrix& W, float* y,
                 const float* bias = nullptr) {
  if (W.exl3) return exl3_linear_bf16<Acc>(pool, x, rows, *W.exl3, y);
  const int64_t in = W.in(), out = W.out();
  constexpr int64_t kTile = 32;
  pool.parallel_for(out, [&](int64_t n0, int64_t n1) {
    Vec wt(static_cast<size_t>(std::min(kTile, n1 - n0) * in));
    for (int64_t t0 = n0; t0 < n1; t0 += kTile) {
      const int64_t t1 = std::min(n1, t0 + kTile);
      for (int64_t n = t0; n < t1; ++n) matrix_row(W, n, &wt[(n - t0) * in]);
      for (int64_t m = 0; m < rows; ++m)
        for (int64_t n = t0; n < t1; ++n) {
          Acc acc = dot<Acc>(x + m * in, &wt[(n - t0) * in], in);
          if (bias) acc += static_cast<Acc>(bias[n]);
          y[m * out + n] = round_bf16(acc);
        }
    }
  }, 4);
}

// y = fp32-linear(x): weights widened exactly, inputs and outputs in Acc, no rounding.
template <typename Acc>
void f32_linear(ThreadPool& pool, const Acc* x, int64_t rows, const Matrix& W, Acc* y) {
  if (W.exl3) return exl3_linear_acc<Acc>(pool, x, rows, *W.exl3, y);
  const int64_t in = W.in(), out = W.out();
  pool.parallel_for(out, [&](int64_t n0, int64_t n1) {
    Vec wr(in);
    for (int64_t n = n0; n < n1; ++n) {
      matrix_row(W, n, wr.data());
      for (int64_t m = 0; m < rows; ++m) {
        const Acc* xr = x + m * in;
        Acc l[8] = {};
        int64_t k = 0;
        for (; k + 8 <= in; k += 8)
          for (int j = 0; j < 8; ++j) l[j] += xr[k + j] * static_cast<Acc>(wr[k + j]);
        for (int j = 0; k < in; ++k, ++j) l[j & 7] += xr[k] * static_cast<Acc>(wr[k]);
        y[m * out + n] = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
      }
    }
  }, 4);
}

}  // namespace dsv4::cpu
