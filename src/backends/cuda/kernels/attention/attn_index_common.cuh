// Exactness helpers shared by the lightning indexer's two score kernels (attn_index.cu: dp4a;
// attn_index_mma.cu: int8 tensor cores): the integer forms of a group of qi and of an FP4 index-key
// row, and one head's dot qi_h . k, exact where the group exponents allow, else the oracle's fp32 order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels/attention/attn_device.cuh"

namespace dsv4::cuda::index_detail {

using namespace attn;

// The dot qi_h . k_t of one head of qi and one index-key row (head_dot, below).
// Both operands are FP4 with power-of-two group scales: qi_h = n * 2^Eq and k_t = m * 2^Ek per
// 32-element group g (n, m small integers; a group of qi that is not of that form sends the head
// to the float path). Every product is then exactly n*m * 2^(Eq+Ek), and while the group exponents
// E_g = Eq_g + Ek_g of the nonzero groups span at most 9 binades (inside [-149, 100]) every partial
// sum of the oracle's order is exact too (|sum| < 23040 * 2^Emax < 2^24 * 2^Emin), so the oracle's
// dot equals the exact sum_g D_g * 2^E_g with D_g the group's integer dot (dp4a). Otherwise the
// (key, head) takes the float path in the oracle's order.
constexpr int kExcluded = 100000;   // exponent sentinel: an all-zero group of qi (contributes 0)
constexpr int kNotFp4 = -100000;    // exponent sentinel: a group of qi not of the integer form

__device__ __forceinline__ float pow2_exact(int e) {  // 2^e for -149 <= e <= 127
  return e >= -126 ? __int_as_float((e + 127) << 23) : __int_as_float(1 << (e + 149));
}

// Four FP4 codes (16 bits, element order) -> four int8 of 2*e2m1 in {0, +-1, +-2, +-3, +-4, +-6, +-8, +-12}.
__device__ __forceinline__ uint32_t e2m1x4_to_i8x4(uint32_t c16) {
  const uint32_t mag = __byte_perm(0x03020100u, 0x0c080604u, c16 & 0x7777u);
  const uint32_t neg = __byte_perm(0u, 0xffffffffu, ((c16 >> 3) & 0x1111u) << 2);
  return __vsub4(mag ^ neg, neg);
}

// The integer form of one 32-element group x of qi: words = the int8 n_i = x_i / 2^e (|x| / 2^e < 16,
// 2^e from the group's largest magnitude); returns e, kExcluded for an all-zero group or kNotFp4
// when some n_i is not an integer or n_i * 2^e does not give x_i back (no underflow on the way).
__device__ __forceinline__ int q_group_form(const float* x, uint32_t (&words)[8]) {
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(x[i]));
  const int ex = static_cast<int>((__float_as_uint(amax) >> 23) & 255u) - 127;
  const int e = ex - 3;
  bool ok = amax == 0.0f || (ex > -127 && ex < 128);
#pragma unroll
  for (int j = 0; j < 8; ++j) words[j] = 0;
  if (ok && amax != 0.0f) {
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const float n = ldexpf(x[i], -e);
      ok = ok && n == rintf(n) && ldexpf(n, e) == x[i];
      words[i >> 2] |= (static_cast<uint32_t>(static_cast<int>(n)) & 255u) << (8 * (i & 3));
    }
  }
  return !ok ? kNotFp4 : amax == 0.0f ? kExcluded : e;
}

// One index-key row as int8 words of 2*e2m1 (kw) and group exponents ek (value = m * 2^ek).
template <int IHD>
__device__ __forceinline__ void key_form(const uint8_t* row, uint32_t (&kw)[IHD / 4], int (&ek)[IHD / 32]) {
#pragma unroll
  for (int i = 0; i < IHD / 8; ++i) {
    uint32_t c;
    if constexpr (IHD == 128) {
      c = reinterpret_cast<const uint32_t*>(row)[i];  // 68 B rows: 4-byte aligned
    } else {
      c = row[4 * i] | (uint32_t{row[4 * i + 1]} << 8) | (uint32_t{row[4 * i + 2]} << 16) | (uint32_t{row[4 * i + 3]} << 24);
    }
    kw[2 * i] = e2m1x4_to_i8x4(c & 0xffffu);
    kw[2 * i + 1] = e2m1x4_to_i8x4(c >> 16);
  }
#pragma unroll
  for (int g = 0; g < IHD / 32; ++g) ek[g] = static_cast<int>(row[IHD / 2 + g]) - 128;  // ue8m0 byte b: 2^(b-127) = 2 * 2^(b-128)
}

// qi_h . k for one head (qh: its floats, qwh / qeh: its group forms, 16-byte aligned words) and one
// key row (row, with its key_form kw / ek): the exact sum_g D_g * 2^E_g when the exponents allow,
// else the oracle's fp32 order.
template <int IHD>
__device__ __forceinline__ float head_dot(const float* qh, const uint32_t* qwh, const int* qeh, const uint8_t* row,
                                          const uint32_t (&kw)[IHD / 4], const int (&ek)[IHD / 32]) {
  constexpr int G = IHD / 32;
  int emin = 1 << 20, emax = -(1 << 20);
  bool fp4 = true;
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const int e = qeh[g];
    fp4 = fp4 && e != kNotFp4;
    if (e == kExcluded) continue;
    emin = min(emin, e + ek[g]);
    emax = max(emax, e + ek[g]);
  }
  float dot;
  if (fp4 && (emax < emin || (emax - emin <= 9 && emin >= -149 && emax <= 100))) {
    dot = 0.0f;
    const uint4* qv = reinterpret_cast<const uint4*>(qwh);
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const uint4 a = qv[2 * g], b = qv[2 * g + 1];
      int acc = 0;
      acc = __dp4a(static_cast<int>(kw[8 * g + 0]), static_cast<int>(a.x), acc);
      acc = __dp4a(static_cast<int>(kw[8 * g + 1]), static_cast<int>(a.y), acc);
      acc = __dp4a(static_cast<int>(kw[8 * g + 2]), static_cast<int>(a.z), acc);
      acc = __dp4a(static_cast<int>(kw[8 * g + 3]), static_cast<int>(a.w), acc);
      acc = __dp4a(static_cast<int>(kw[8 * g + 4]), static_cast<int>(b.x), acc);
      acc = __dp4a(static_cast<int>(kw[8 * g + 5]), static_cast<int>(b.y), acc);
      acc = __dp4a(static_cast<int>(kw[8 * g + 6]), static_cast<int>(b.z), acc);
      acc = __dp4a(static_cast<int>(kw[8 * g + 7]), static_cast<int>(b.w), acc);
      const int e = qeh[g];
      if (e != kExcluded) dot = __fadd_rn(dot, __fmul_rn(static_cast<float>(acc), pow2_exact(e + ek[g])));
    }
  } else {
    float l[8] = {};
    for (int i = 0; i < IHD; ++i) l[i & 7] = __fadd_rn(l[i & 7], __fmul_rn(qh[i], fp4ue8m0_row_at(row, IHD, i)));
    dot = __fadd_rn(__fadd_rn(__fadd_rn(l[0], l[1]), __fadd_rn(l[2], l[3])),
                    __fadd_rn(__fadd_rn(l[4], l[5]), __fadd_rn(l[6], l[7])));
  }
  return dot;
}

}  // namespace dsv4::cuda::index_detail
