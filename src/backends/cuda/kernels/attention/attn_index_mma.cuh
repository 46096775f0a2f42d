// Building blocks of the lightning indexer's tensor-core score kernel (index_scores_mma_kernel and its
// launcher: attn_index_mma.cu): its layout constants, the int8 MMA, the integer-path term and the
// dp4a-path fallback term, its shared-memory size, and the launcher attn_index.cu's dispatcher calls.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels/attention/attention_kernels.cuh"
#include "backends/cuda/kernels/attention/attn_device.cuh"
#include "backends/cuda/kernels/attention/attn_index_common.cuh"

namespace dsv4::cuda::index_detail {

using namespace attn;

// ---- Tensor-core kernel: many rows against tiles of keys ----
//
// A block takes 8 rows and a chunk of key tiles; each tile of 128 keys is staged in shared memory
// once (as int8 A fragments) for all of the block's rows that read that piece, and the work units
// (row, 32 keys) go to the 8 warps (with one piece, warp w keeps row w). A warp holds the unit's
// row's query heads as int8 B fragments and computes, per 16 keys and 8 heads, the
// integer dots by mma.m16n8k32.s8 (k = 32 = one group), the groups of a head accumulating in one
// int32: the group scales are folded into the integers. For a head whose nonzero groups' exponents
// span at most 3 binades, n_i * 2^(Eq_g - qmin) fits int8 (|n| <= 15: <= 120), and for a key whose
// nonzero groups span at most 3, m_i * 2^(Ek_g - kmin) does (|m| <= 12: <= 96); the int32 sum is then the
// exact S = sum_g D_g * 2^(E_g - qmin - kmin) (|S| <= 128 * 120 * 96 < 2^21) and the dot is
// S * 2^qmin * 2^kmin, exact (qmin, kmin in [-64, 40]). Those bounds put every such (head, key) under
// the dp4a kernel's exactness condition (span <= 6, exponents in [-128, 86]), so both give the exact
// sum, the same float. Other pairs (heads or keys off those bounds, a group of qi not of integer
// form, a non-finite weight) take the dp4a kernel's operations, the same bits again: the warp
// redoes a key off the path for its 32 heads (a lane per head) and a head off the path for the 32
// keys (a lane per key), the group dots by dp4a from the staged integers (shifted back: every
// product carries the shifts), the fp32 path from qi and the key row where the exponents need it.
// The accumulator starts at the bits of 1.5 * 2^23: as a float it then holds 1.5 * 2^23 + S, and one
// fma with -1.5 * 2^23 * 2^qmin gives S * 2^qmin. The terms then go through shared memory so that
// one lane adds a key's terms in head order, as the dp4a kernel does.
constexpr int kMmaRows = 8;                  // rows per block, one per warp
constexpr int kMmaThreads = 32 * kMmaRows;
constexpr int kMmaKeys = 128;                // keys per staged tile (4 pairs of 16-key MMA tiles)
constexpr int kScrStride = 36;               // floats per key of a warp's term scratch (conflict-free float4s)
constexpr int kMagicBits = 0x4B400000;       // 1.5 * 2^23
constexpr float kMagic = 12582912.0f;
constexpr int kMmaMinRows = 8;               // automatic choice: the dp4a kernel below this many rows

__device__ __forceinline__ void mma_s8(int (&d)[4], const uint4& a, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
#else
  __trap();
#endif
}

// rb for a non-NaN float (the same bits: round to nearest even on the top 16 bits).
__device__ __forceinline__ float rb_finite(float x) {
  const uint32_t u = __float_as_uint(x);
  return __uint_as_float((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}

// e2m1x4_to_i8x4 times 2^b (b <= 3: magnitudes <= 96, no carry between bytes of the tables).
__device__ __forceinline__ uint32_t e2m1x4_to_i8x4_shl(uint32_t c16, int b) {
  const uint32_t mag = __byte_perm(0x03020100u << b, 0x0c080604u << b, c16 & 0x7777u);
  const uint32_t neg = __byte_perm(0u, 0xffffffffu, ((c16 >> 3) & 0x1111u) << 2);
  return __vsub4(mag ^ neg, neg);
}

// Four int8 each times 2^a (|n| * 2^a <= 127): the bits shifted into a byte from the one below are cleared.
__device__ __forceinline__ uint32_t shl_i8x4(uint32_t w, int a) {
  return (w << a) & ~(0x01010101u * ((1u << a) - 1u));
}

// One term on the integer path: acc = kMagicBits + S (see above), sq = 2^qmin, nq = -kMagic * sq,
// pk = 2^kmin; the dot S * 2^(qmin + kmin) is finite, w finite.
__device__ __forceinline__ float mma_term(int acc, float sq, float nq, float pk, float w) {
  const float dot = __fmul_rn(__fmaf_rn(__int_as_float(acc), sq, nq), pk);
  float v = rb_finite(dot);
  v = v < 0.0f ? 0.0f : v;
  return rb_finite(__fmul_rn(v, w));
}

// One term by the dp4a kernel's code (qh: the head's floats in qi, row: the key row).
template <int IHD>
__device__ __noinline__ float general_term(const float* qh, const uint8_t* row, float w) {
  constexpr int G = IHD / 32, W = IHD / 4;
  alignas(16) uint32_t qw[W];
  int qe[G];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    uint32_t words[8];
    qe[g] = q_group_form(qh + 32 * g, words);
#pragma unroll
    for (int j = 0; j < 8; ++j) qw[8 * g + j] = words[j];
  }
  uint32_t kw[W];
  int ek[G];
  key_form<IHD>(row, kw, ek);
  float v = rb(head_dot<IHD>(qh, qw, qe, row, kw, ek));
  v = v < 0.0f ? 0.0f : v;
  return rb(__fmul_rn(v, w));
}

// Dynamic shared memory of the tensor-core kernel, in bytes.
__host__ __device__ constexpr int64_t mma_scratch_bytes(int64_t ihd) {
  const int64_t terms = int64_t{kMmaRows} * 32 * kScrStride * 4;
  const int64_t raw = int64_t{kMmaKeys} * (ihd / 2 + ihd / 32);
  return ((terms > raw ? terms : raw) + 15) / 16 * 16;
}
__host__ __device__ constexpr int64_t mma_shared_bytes(int64_t IH, int64_t ihd) {
  return int64_t{kMmaRows} * IH * ihd + 4 * int64_t{kMmaRows} * IH * 4 + int64_t{kMmaRows} * IH * (ihd / 32) * 4 +
         (int64_t{kMmaRows} * (IH / 32) * 4 + 15) / 16 * 16 + int64_t{kMmaKeys} * ihd + int64_t{kMmaKeys} * 12 +
         mma_scratch_bytes(ihd);
}

// index_scores (attention_kernels.cuh) by index_scores_mma_kernel: IH 32 or 64, ihd 32, 64 or 128,
// at most 65535 blocks of kMmaRows rows.
cudaError_t index_scores_mma(const float* qi, const float* wt, float wscale, const PieceDev* pieces,
                             const int32_t* row_piece, const int64_t* pos, int64_t rows, int64_t IH, int64_t ihd,
                             int ratio, float* score, int64_t stride, int64_t max_lc, cudaStream_t s);

}  // namespace dsv4::cuda::index_detail
