// EXL3 linears on the oracle: Wq decoded once at load, y = ((x∘suh)·H)·Wq·H∘svh in the accumulator
// type, each output element summed in one fixed order whatever the number of rows.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cpu/numerics.h"
#include "core/thread_pool.h"
#include "formats/exl3/linear.h"
#include "formats/exl3/hadamard.h"

namespace dsv4::cpu {

// One EXL3 linear W [in, out] (y = x·W; formats.md §1.3), held padded to multiples of 128 as stored.
struct Exl3Part {
  int64_t in = 0, out = 0;                // logical dims: reads `in` inputs, writes `out` outputs
  int64_t in_padded = 0, out_padded = 0;  // multiples of 128 (padded inputs are zero, padded outputs dropped)
  std::vector<float> wq_t;                // Wq, exact fp16 values, transposed: [out_padded, in_padded]
  std::vector<float> suh, svh;            // fp16 values [in_padded], [out_padded]
  std::vector<float> bias;                // fp16 values [out_padded], or empty
  exl3::Linear packed;                    // the stored tensors (trellis, suh, svh): what a device uploads
  // The padded out width a device chooses this part's K split from (cuda::Exl3Weights::split_out_features):
  // a tensor-parallel rank's column slice (fabric/exl3_cut.h) keeps the whole part's, so it sums K in the
  // whole part's order; 0 = out_padded. The oracle's sums never depend on out (each output sums its
  // in_padded products in one order), so it reads nothing here.
  int64_t k_split_out = 0;
};

// A linear made of block-diagonal EXL3 parts: part g reads inputs [Σ in of parts < g, + in) and writes
// outputs [Σ out of parts < g, + out). One part for an ordinary linear; o_groups parts for attn.wo_a.
struct Exl3Weight {
  std::vector<Exl3Part> parts;
  int64_t in = 0, out = 0;  // totals over the parts
};

namespace exl3_detail {

// Sum of a[i]*b[i] with 8 interleaved partial sums combined pairwise (the order of cpu::dot).
template <typename Acc>
inline Acc dot8(const Acc* a, const float* b, int64_t n) {
  Acc l[8] = {};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (int j = 0; j < 8; ++j) l[j] += a[k + j] * static_cast<Acc>(b[k + j]);
  for (int j = 0; k < n; ++k, ++j) l[j & 7] += a[k] * static_cast<Acc>(b[k]);
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

// Calls store(row, output column, value in Acc) for every logical output.
template <typename Acc, typename In, typename Store>
void run(ThreadPool& pool, const In* x, int64_t rows, const Exl3Weight& W, Store&& store) {
  const Acc inv_sqrt = Acc(1) / std::sqrt(Acc(exl3::kHadamardSize));
  int64_t x0 = 0, y0 = 0;
  for (const Exl3Part& P : W.parts) {
    const int64_t ip = P.in_padded, op = P.out_padded;
    std::vector<Acc> u(rows * ip, Acc(0)), v(rows * op);
    for (int64_t r = 0; r < rows; ++r) {  // u = H(x∘suh)/sqrt(128) per 128-block
      Acc* ur = &u[r * ip];
      for (int64_t k = 0; k < P.in; ++k) ur[k] = static_cast<Acc>(x[r * W.in + x0 + k]) * static_cast<Acc>(P.suh[k]);
      for (int64_t k0 = 0; k0 < ip; k0 += exl3::kHadamardSize) exl3::hadamard128_unnormalized(ur + k0);
      for (int64_t k = 0; k < ip; ++k) ur[k] *= inv_sqrt;
    }
    pool.parallel_for(op, [&](int64_t n0, int64_t n1) {  // v = u·Wq
      for (int64_t n = n0; n < n1; ++n)
        for (int64_t r = 0; r < rows; ++r) v[r * op + n] = dot8<Acc>(&u[r * ip], &P.wq_t[n * ip], ip);
    }, 4);
    for (int64_t r = 0; r < rows; ++r) {  // y = H(v)/sqrt(128) ∘ svh (+ bias)
      Acc* vr = &v[r * op];
      for (int64_t n0 = 0; n0 < op; n0 += exl3::kHadamardSize) exl3::hadamard128_unnormalized(vr + n0);
      for (int64_t n = 0; n < P.out; ++n) {
        Acc value = vr[n] * inv_sqrt * static_cast<Acc>(P.svh[n]);
        if (!P.bias.empty()) value += static_cast<Acc>(P.bias[n]);
        store(r, y0 + n, value);
      }
    }
    x0 += P.in;
    y0 += P.out;
  }
}

}  // namespace exl3_detail

// y[rows, out] = EXL3-linear(x[rows, in]) rounded to bf16: stands in for the FP8, FP4 and bf16 linears
// (their outputs are bf16). The input is used as is (no activation quantization: EXL3 has none).
template <typename Acc>
void exl3_linear_bf16(ThreadPool& pool, const float* x, int64_t rows, const Exl3Weight& W, float* y) {
  exl3_detail::run<Acc>(pool, x, rows, W, [&](int64_t r, int64_t n, Acc v) { y[r * W.out + n] = static_cast<float>(round_bf16(v)); });
}

// The same in Acc with no rounding: stands in for the fp32 linears (the LM head).
template <typename Acc>
void exl3_linear_acc(ThreadPool& pool, const Acc* x, int64_t rows, const Exl3Weight& W, Acc* y) {
  exl3_detail::run<Acc>(pool, x, rows, W, [&](int64_t r, int64_t n, Acc v) { y[r * W.out + n] = v; });
}

}  // namespace dsv4::cpu
