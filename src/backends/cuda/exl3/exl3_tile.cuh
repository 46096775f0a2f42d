// EXL3 device pieces shared by the GEMM kernels: trellis tile → mma.m16n8k16 fragments, the
// activation rotation into exact fp16 hi/lo parts, and the warp-level 128-point Hadamard.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace dsv4::cuda::exl3_tile {

// Two codebook values for states a (low half) and b (high half) as one half2 register, each
// rounded to fp16 exactly as the reference decoder rounds it (one fp16 rounding per value).
template <int CB>
__device__ __forceinline__ uint32_t codebook_pair(uint32_t a, uint32_t b) {
  if constexpr (CB == 2) {  // mul1: h = 1024 + unsigned byte sum (dp4a), value = fma(h, 0x1EEE, 0xC931)
    const uint32_t ha = __dp4a(a * 0x83DCD12Du, 0x01010101u, 0x6400u);
    const uint32_t hb = __dp4a(b * 0x83DCD12Du, 0x01010101u, 0x6400u);
    const uint32_t packed = __byte_perm(ha, hb, 0x5410);  // low halves of ha, hb
    const __half2 h = *reinterpret_cast<const __half2*>(&packed);
    const __half2 v = __hfma2(h, __half2half2(__ushort_as_half(0x1EEE)), __half2half2(__ushort_as_half(0xC931)));
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {  // 3INST / MCG: hash, mask/xor, then the fp16 sum of the two halves
    uint32_t xa = CB == 1 ? a * 0xCBAC1FEDu : a * 89226354u + 64248484u;
    uint32_t xb = CB == 1 ? b * 0xCBAC1FEDu : b * 89226354u + 64248484u;
    xa = (xa & 0x8FFF8FFFu) ^ 0x3B603B60u;
    xb = (xb & 0x8FFF8FFFu) ^ 0x3B603B60u;
    const uint32_t lo = __byte_perm(xa, xb, 0x5410);  // (xa.lo, xb.lo)
    const uint32_t hi = __byte_perm(xa, xb, 0x7632);  // (xa.hi, xb.hi)
    const __half2 v = __hadd2(*reinterpret_cast<const __half2*>(&lo), *reinterpret_cast<const __half2*>(&hi));
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// 16 bits at compile-time offset O of the big-endian bit string n0 n1 n2.
template <int O>
__device__ __forceinline__ uint32_t bits16(uint32_t n0, uint32_t n1, uint32_t n2) {
  constexpr int word = O / 32, shift = O % 32;
  const uint32_t hi = word == 0 ? n0 : (word == 1 ? n1 : n2);
  const uint32_t lo = word == 0 ? n1 : n2;
  if constexpr (shift <= 16) return (hi << shift) >> 16;
  else return __funnelshift_l(lo, hi, shift) >> 16;
}

// The lane's 8 values of one tile as 4 half2 pairs (formats.md §1.7: the tile order is the fragment
// order). Value j of lane l sits at k = 2(l%4) + (j&1) + 8((j>>1)&1), n = l/4 + 8(j>>2): b[0..1]
// are the B fragment of columns 0–7, b[2..3] of columns 8–15, and {b0, b2, b1, b3} is the A
// fragment of the transposed tile (rows = the 16 output columns). The lane's states are the
// 16-bit windows ending at bits (8l+j+1)·K of the circular tile stream: after shifting its 4 words
// left by o0 (the window start inside the first word), value j starts at offset j·K.
template <int BITS, int CB>
__device__ __forceinline__ void decode_fragments(const uint32_t (&w)[4], int o0, uint32_t (&b)[4]) {
  const uint32_t n0 = __funnelshift_l(w[1], w[0], o0);
  const uint32_t n1 = __funnelshift_l(w[2], w[1], o0);
  const uint32_t n2 = __funnelshift_l(w[3], w[2], o0);
  b[0] = codebook_pair<CB>(bits16<0 * BITS>(n0, n1, n2), bits16<1 * BITS>(n0, n1, n2));
  b[1] = codebook_pair<CB>(bits16<2 * BITS>(n0, n1, n2), bits16<3 * BITS>(n0, n1, n2));
  b[2] = codebook_pair<CB>(bits16<4 * BITS>(n0, n1, n2), bits16<5 * BITS>(n0, n1, n2));
  b[3] = codebook_pair<CB>(bits16<6 * BITS>(n0, n1, n2), bits16<7 * BITS>(n0, n1, n2));
}

// d[16×8] += a[16×16] · b[16×8]: fp16 operands, fp32 accumulation (products of two fp16 are exact).
__device__ __forceinline__ void mma16816(float (&d)[4], const uint4& a, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
}

// Unnormalized natural-order Walsh–Hadamard transform of 128 values held 4 per lane (lane l holds
// indices 4l..4l+3): two in-register stages, then five shuffle stages; each stage maps a pair
// (lower, upper) to (lower + upper, lower − upper).
__device__ __forceinline__ void hadamard128(float (&v)[4]) {
  float t0 = v[0] + v[1], t1 = v[0] - v[1], t2 = v[2] + v[3], t3 = v[2] - v[3];
  v[0] = t0 + t2;
  v[1] = t1 + t3;
  v[2] = t0 - t2;
  v[3] = t1 - t3;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int m = 1; m < 32; m <<= 1) {
    const bool upper = lane & m;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float other = __shfl_xor_sync(0xFFFFFFFFu, v[i], m);
      v[i] = upper ? other - v[i] : v[i] + other;
    }
  }
}

// Splits a rotated 128-block of one row (4 values per lane, after hadamard128) into fp16 hi + lo
// parts scaled by a power of two chosen from the block's own maximum, so that hi + lo carries the
// fp32 value to about 2^-22 and no part overflows. Returns the inverse scale (exact power of two).
// hi[p], lo[p] hold the pairs (v[2p], v[2p+1]) as half2 registers.
__device__ __forceinline__ float split_hi_lo(const float (&v)[4], uint32_t (&hi)[2], uint32_t (&lo)[2]) {
  float m = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, s));
  int e = 0;
  if (m > 0.f && m <= 3.0e38f) frexpf(m, &e);  // m < 2^e
  e = max(-100, min(e, 100));
  const float up = ldexpf(1.f, 15 - e);  // m · up < 2^15: hi stays below the fp16 maximum
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    const float a = v[2 * p] * up, b = v[2 * p + 1] * up;
    const __half ha = __float2half_rn(a), hb = __float2half_rn(b);
    const __half la = __float2half_rn(a - __half2float(ha)), lb = __float2half_rn(b - __half2float(hb));
    const __half2 h2 = __halves2half2(ha, hb), l2 = __halves2half2(la, lb);
    hi[p] = *reinterpret_cast<const uint32_t*>(&h2);
    lo[p] = *reinterpret_cast<const uint32_t*>(&l2);
  }
  return ldexpf(1.f, e - 15);
}

}  // namespace dsv4::cuda::exl3_tile
