// EXL3 linears on the oracle: y = ((x∘suh)·H)·Wq·H∘svh in the accumulator type, Wq decoded from the stored
// trellis 16 output columns at a time in each call; each output element summed in one fixed order whatever
// the number of rows.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/cpu/numerics.h"
#include "core/thread_pool.h"
#include "family/deepseek_v41/weights.h"
#include "formats/exl3/hadamard.h"
#include "formats/exl3/half.h"
#include "formats/exl3/linear.h"

namespace dsv4::cpu {

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

// fp16 bits widened to float (exact).
inline float half(uint16_t h) { return static_cast<float>(exl3::half_bits_to_double(h)); }

// Calls store(row, output column, value in Acc) for every logical output.
template <typename Acc, typename In, typename Store>
void run(ThreadPool& pool, const In* x, int64_t rows, const family::Exl3Linear& W, Store&& store) {
  const Acc inv_sqrt = Acc(1) / std::sqrt(Acc(exl3::kHadamardSize));
  int64_t x0 = 0, y0 = 0;
  for (const family::Exl3Part& P : W.parts) {
    const exl3::Linear& L = P.packed;
    const int64_t ip = P.in_padded, op = P.out_padded;
    std::vector<Acc> u(rows * ip, Acc(0)), v(rows * op);
    for (int64_t r = 0; r < rows; ++r) {  // u = H(x∘suh)/sqrt(128) per 128-block
      Acc* ur = &u[r * ip];
      for (int64_t k = 0; k < P.in; ++k) ur[k] = static_cast<Acc>(x[r * W.in + x0 + k]) * static_cast<Acc>(half(L.suh[k]));
      for (int64_t k0 = 0; k0 < ip; k0 += exl3::kHadamardSize) exl3::hadamard128_unnormalized(ur + k0);
      for (int64_t k = 0; k < ip; ++k) ur[k] *= inv_sqrt;
    }
    pool.parallel_for(op / 16, [&](int64_t t0, int64_t t1) {  // v = u·Wq, 16 columns decoded at a time
      std::vector<uint16_t> bits(static_cast<size_t>(16 * ip));
      std::vector<float> wq(static_cast<size_t>(16 * ip));
      for (int64_t nt = t0; nt < t1; ++nt) {
        exl3::decode_wq_columns(L, nt, nt + 1, bits.data());
        for (size_t i = 0; i < bits.size(); ++i) wq[i] = half(bits[i]);
        for (int64_t c = 0; c < 16; ++c)
          for (int64_t r = 0; r < rows; ++r) v[r * op + nt * 16 + c] = dot8<Acc>(&u[r * ip], &wq[c * ip], ip);
      }
    }, 1);
    for (int64_t r = 0; r < rows; ++r) {  // y = H(v)/sqrt(128) ∘ svh (+ bias)
      Acc* vr = &v[r * op];
      for (int64_t n0 = 0; n0 < op; n0 += exl3::kHadamardSize) exl3::hadamard128_unnormalized(vr + n0);
      for (int64_t n = 0; n < P.out; ++n) {
        Acc value = vr[n] * inv_sqrt * static_cast<Acc>(half(L.svh[n]));
        if (!L.bias.empty()) value += static_cast<Acc>(half(L.bias[n]));
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
void exl3_linear_bf16(ThreadPool& pool, const float* x, int64_t rows, const family::Exl3Linear& W, float* y) {
  exl3_detail::run<Acc>(pool, x, rows, W, [&](int64_t r, int64_t n, Acc v) { y[r * W.out + n] = static_cast<float>(round_bf16(v)); });
}

// The same in Acc with no rounding: stands in for the fp32 linears (the LM head).
template <typename Acc>
void exl3_linear_acc(ThreadPool& pool, const Acc* x, int64_t rows, const family::Exl3Linear& W, Acc* y) {
  exl3_detail::run<Acc>(pool, x, rows, W, [&](int64_t r, int64_t n, Acc v) { y[r * W.out + n] = v; });
}

}  // namespace dsv4::cpu
