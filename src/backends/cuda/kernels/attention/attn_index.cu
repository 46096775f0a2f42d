// The lightning indexer's scores on the device (model-spec.md §3.6): bf16 index scores against packed
// FP4 index keys (the candidate blocks and top-k that select from them: attn_topk.cu).
// Index scores come from one of two kernels with the same bits (both give every (head, key) dot
// exactly where the FP4 group exponents allow, else the oracle's fp32 order): below 8 rows, or for
// a head count that is not 32 or 64, index_scores_kernel (group dots by dp4a, one (row, key) per
// thread or per four threads); from 8 rows, index_scores_mma_kernel (int8 tensor-core MMAs: 8 rows
// per block against tiles of 128 keys staged in shared memory once for all of them).
// DSV4_INDEX_MMA / set_index_scores_impl force either kernel.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "backends/cuda/kernels/attention/attention_kernels.cuh"
#include "backends/cuda/kernels/attention/attn_device.cuh"

namespace dsv4::cuda {

namespace {

using namespace attn;

// Index scores per (row, t): the heads' terms bf16(relu(bf16(qi_h . k_t)) * w_h) (the oracle's dot:
// 8 interleaved fp32 partial sums combined pairwise) added in head order, s += term_h, as the
// oracle does; for few rows four threads per t compute a quarter of the terms each, the first adds.
// Both operands are FP4 with power-of-two group scales: qi_h = n * 2^Eq and k_t = m * 2^Ek per
// 32-element group g (n, m small integers; a group of qi that is not of that form sends the head
// to the float path). Every product is then exactly n*m * 2^(Eq+Ek), and while the group exponents
// E_g = Eq_g + Ek_g of the nonzero groups span at most 9 binades (inside [-149, 100]) every partial
// sum of the oracle's order is exact too (|sum| < 23040 * 2^Emax < 2^24 * 2^Emin), so the oracle's
// dot equals the exact sum_g D_g * 2^E_g with D_g the group's integer dot (dp4a). Otherwise the
// (key, head) takes the float path in the oracle's order.
constexpr int kScoreThreads = 256;
constexpr int kScoreKeys = kScoreThreads / 4;  // key rows per block (a quarter of the heads per thread)
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
                                          const uint32_t (&kw)[IHD / 4], const int (&ek)[IHD / 32]);

template <int IHD>
__device__ __forceinline__ float index_terms(const uint8_t* row, const float* q, const float* w, const uint32_t* qw,
                                             const int* qe, int64_t h_begin, int64_t h_end, float* out);

template <int IHD>
__global__ void __launch_bounds__(kScoreThreads)
index_scores_kernel(const float* qi, const float* wt, float wscale, const PieceDev* pieces, const int32_t* row_piece,
                    const int64_t* pos, int64_t IH, int ratio, float* score, int64_t stride, int split) {
  constexpr int G = IHD / 32, W = IHD / 4;  // groups, int8x4 words per head
  extern __shared__ __align__(16) float sh[];
  float* q = sh;                                                   // [IH, IHD] floats
  float* w = q + IH * IHD;                                         // [IH]
  uint32_t* qw = reinterpret_cast<uint32_t*>(w + ((IH + 3) & ~int64_t{3}));  // [IH, W] int8x4, 16 B aligned
  int* qe = reinterpret_cast<int*>(qw + IH * W);                   // [IH, G] exponents / sentinels
  const int64_t r = blockIdx.y;
  for (int64_t i0 = threadIdx.x; i0 < IH * IHD; i0 += 8 * kScoreThreads) {  // 8 loads in flight
    float t[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) t[u] = i0 + u * kScoreThreads < IH * IHD ? __ldg(qi + r * IH * IHD + i0 + u * kScoreThreads) : 0.0f;
#pragma unroll
    for (int u = 0; u < 8; ++u)
      if (i0 + u * kScoreThreads < IH * IHD) q[i0 + u * kScoreThreads] = t[u];
  }
  for (int64_t h = threadIdx.x; h < IH; h += blockDim.x) w[h] = rb(__fmul_rn(wt[r * IH + h], wscale));
  __syncthreads();
  // Integer form of every 32-element group of qi, one thread per group.
  for (int64_t task = threadIdx.x; task < IH * G; task += blockDim.x) {
    uint32_t words[8];
    qe[task] = q_group_form(q + task * 32, words);
#pragma unroll
    for (int j = 0; j < 8; ++j) qw[task * 8 + j] = words[j];
  }
  __syncthreads();
  const int64_t lc = (pos[r] + 1) / ratio;
  const uint8_t* keys = pieces[row_piece[r]].ikeys;
  if (split == 1) {  // one thread per key row, every head
    const int64_t t = static_cast<int64_t>(blockIdx.x) * kScoreThreads + threadIdx.x;
    if (t < lc) score[r * stride + t] = rb(index_terms<IHD>(keys + t * (IHD / 2 + IHD / 32), q, w, qw, qe, 0, IH, nullptr));
    return;
  }
  // Four threads per key row, a quarter of the heads each; the terms summed in head order after.
  const int tl = threadIdx.x % kScoreKeys, hq = threadIdx.x / kScoreKeys;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kScoreKeys + tl;
  const int64_t hpq = (IH + 3) / 4, h_begin = hq * hpq, h_end = h_begin + hpq < IH ? h_begin + hpq : IH;
  float* terms = reinterpret_cast<float*>(qe + IH * G);  // [kScoreKeys][IH + 1]
  if (t < lc) (void)index_terms<IHD>(keys + t * (IHD / 2 + IHD / 32), q, w, qw, qe, h_begin, h_end, terms + tl * (IH + 1));
  __syncthreads();
  if (hq != 0 || t >= lc) return;
  float s = 0.0f;
  for (int64_t h = 0; h < IH; ++h) s = __fadd_rn(s, terms[tl * (IH + 1) + h]);
  score[r * stride + t] = rb(s);
}

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

// The terms bf16(relu(bf16(qi_h . k)) * w_h) of heads [h_begin, h_end) for one key row (to out[h]
// unless out is null); returns their sum in head order from 0.
template <int IHD>
__device__ __forceinline__ float index_terms(const uint8_t* row, const float* q, const float* w, const uint32_t* qw,
                                            const int* qe, int64_t h_begin, int64_t h_end, float* out) {
  constexpr int G = IHD / 32, W = IHD / 4;
  uint32_t kw[W];
  int ek[G];
  key_form<IHD>(row, kw, ek);
  float s = 0.0f;
  for (int64_t h = h_begin; h < h_end; ++h) {
    float v = rb(head_dot<IHD>(q + h * IHD, qw + h * W, qe + h * G, row, kw, ek));
    v = v < 0.0f ? 0.0f : v;
    const float term = rb(__fmul_rn(v, w[h]));
    if (out) out[h] = term;
    s = __fadd_rn(s, term);
  }
  return s;
}

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

template <int IHD, int NHB>
__global__ void __launch_bounds__(kMmaThreads, 2)
index_scores_mma_kernel(const float* qi, const float* wt, float wscale, const PieceDev* pieces, const int32_t* row_piece,
                        const int64_t* pos, int64_t rows, int ratio, float* score, int64_t stride, int tiles_per_chunk) {
  constexpr int IH = 32 * NHB, G = IHD / 32, RB = IHD / 2 + G;
  constexpr int QW = IH * IHD / 4;  // words of one row's B fragments
  extern __shared__ __align__(16) uint32_t shm[];
  uint32_t* qfrag = shm;                                                    // [rows][QW] B fragments
  float* hsq = reinterpret_cast<float*>(qfrag + kMmaRows * QW);             // [rows][IH] 2^qmin, 0 off the integer path
  float* hnq = hsq + kMmaRows * IH;                                         // [rows][IH] -kMagic * 2^qmin
  float* hw = hnq + kMmaRows * IH;                                          // [rows][IH] bf16(wt * wscale)
  uint32_t* qa = reinterpret_cast<uint32_t*>(hw + kMmaRows * IH);           // [rows][IH] group shifts, a byte each
  int* qe = reinterpret_cast<int*>(qa + kMmaRows * IH);                     // [rows][IH][G] group exponents / sentinels
  uint32_t* hgood = reinterpret_cast<uint32_t*>(qe + kMmaRows * IH * G);    // [rows][NHB] integer-path heads, a bit each
  uint32_t* kfrag = hgood + (kMmaRows * NHB + 3) / 4 * 4;                   // [kMmaKeys * IHD / 4] A fragments
  float* kpk = reinterpret_cast<float*>(kfrag + kMmaKeys * IHD / 4);        // [kMmaKeys] 2^kmin, 0 off the integer path
  uint32_t* kb = reinterpret_cast<uint32_t*>(kpk + kMmaKeys);               // [kMmaKeys] group shifts, a byte each
  uint32_t* kek = kb + kMmaKeys;                                            // [kMmaKeys] group scale bytes
  float* scr = reinterpret_cast<float*>(kek + kMmaKeys);                    // [rows][32][kScrStride] terms, or:
  uint8_t* raw = reinterpret_cast<uint8_t*>(scr);                           //   key staging [kMmaKeys][RB]
  __shared__ int64_t s_lc[kMmaRows];
  __shared__ int s_piece[kMmaRows];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kMmaRows;
  if (threadIdx.x < kMmaRows) {
    const int64_t r = r0 + threadIdx.x;
    s_lc[threadIdx.x] = r < rows ? (pos[r] + 1) / ratio : 0;
    s_piece[threadIdx.x] = r < rows ? row_piece[r] : -1;
  }
  __syncthreads();
  const int64_t k_begin = static_cast<int64_t>(blockIdx.x) * tiles_per_chunk * kMmaKeys;
  const int64_t k_end = k_begin + static_cast<int64_t>(tiles_per_chunk) * kMmaKeys;
  int64_t lc_max = 0;
  for (int i = 0; i < kMmaRows; ++i) lc_max = s_lc[i] > lc_max ? s_lc[i] : lc_max;
  if (k_begin >= lc_max) return;

  // Queries: the integer form of every group (words to their B-fragment places, unscaled) ...
  auto bfrag_word = [&](int w, int h, int g, int wd) -> uint32_t& {
    const int hb = h >> 5, hh = h & 31;
    const int gg = 2 * (hh >> 3) + (hh & 1), j = (hh & 7) >> 1;  // column gg of n-tile j holds head hh
    return qfrag[w * QW + ((hb * G + g) * 2 + (j >> 1)) * 128 + (gg * 4 + (wd & 3)) * 4 + 2 * (j & 1) + (wd >> 2)];
  };
  for (int task = threadIdx.x; task < kMmaRows * IH * G; task += kMmaThreads) {
    const int w = task / (IH * G), h = (task / G) % IH, g = task % G;
    const int64_t r = r0 + w;
    int e = kExcluded;
    if (r < rows) {
      uint32_t words[8];
      e = q_group_form(qi + (r * IH * G + task % (IH * G)) * 32, words);
#pragma unroll
      for (int wd = 0; wd < 8; ++wd) bfrag_word(w, h, g, wd) = words[wd];
    }
    qe[task] = e;
  }
  __syncthreads();
  // ... then per head: on the integer path or not, its scale and weight, the groups' shifts ...
  for (int task = threadIdx.x; task < kMmaRows * IH; task += kMmaThreads) {  // whole warps: 32 heads of one row
    const int w = task / IH, h = task % IH;
    const int64_t r = r0 + w;
    const int* e = qe + task * G;
    bool fp4 = true;
    int lo = 1 << 20, hi = -(1 << 20);
#pragma unroll
    for (int g = 0; g < G; ++g) {
      fp4 = fp4 && e[g] != kNotFp4;
      if (e[g] == kExcluded || e[g] == kNotFp4) continue;
      lo = min(lo, e[g]);
      hi = max(hi, e[g]);
    }
    if (hi < lo) lo = hi = 0;  // no nonzero group
    const float wv = r < rows ? rb(__fmul_rn(wt[r * IH + h], wscale)) : 0.0f;
    const bool good = r < rows && fp4 && hi - lo <= 3 && lo >= -64 && lo <= 40 &&
                      (__float_as_uint(wv) & 0x7fffffffu) < 0x7f800000u;
    uint32_t sh = 0;
#pragma unroll
    for (int g = 0; g < G; ++g)
      if (good && e[g] != kExcluded) sh |= static_cast<uint32_t>(e[g] - lo) << (8 * g);
    qa[task] = sh;
    const float sq = good ? pow2_exact(lo) : 0.0f;
    hsq[task] = sq;
    hnq[task] = __fmul_rn(-kMagic, sq);
    hw[task] = wv;
    const unsigned m = __ballot_sync(0xffffffffu, good);
    if (lane == 0) hgood[w * NHB + (h >> 5)] = m;
  }
  __syncthreads();
  // ... and the words of the integer-path heads scaled by their groups' shifts.
  for (int task = threadIdx.x; task < kMmaRows * IH * G; task += kMmaThreads) {
    const int w = task / (IH * G), h = (task / G) % IH, g = task % G;
    const int a = (qa[w * IH + h] >> (8 * g)) & 255;
    if (r0 + w >= rows || a == 0) continue;
#pragma unroll
    for (int wd = 0; wd < 8; ++wd) {
      uint32_t& x = bfrag_word(w, h, g, wd);
      x = shl_i8x4(x, a);
    }
  }
  __syncthreads();

  const int g4 = lane >> 2, c4 = lane & 3;
  uint32_t bq[G][8];  // B fragments of one head block: n-tile j's (b0, b1) = bq[ks][2j], bq[ks][2j + 1]
  int b_row = -1;     // the row whose fragments bq holds (one head block)
  auto load_b = [&](int w, int hb) {
    const uint32_t* src = qfrag + w * QW + hb * G * 256 + lane * 4;
#pragma unroll
    for (int ks = 0; ks < G; ++ks) {
      const uint4 x = *reinterpret_cast<const uint4*>(src + ks * 256);
      const uint4 y = *reinterpret_cast<const uint4*>(src + ks * 256 + 128);
      bq[ks][0] = x.x; bq[ks][1] = x.y; bq[ks][2] = x.z; bq[ks][3] = x.w;
      bq[ks][4] = y.x; bq[ks][5] = y.y; bq[ks][6] = y.z; bq[ks][7] = y.w;
    }
  };
  float* my_scr = scr + warp * 32 * kScrStride;
  // The term of head h of row w and key tl of the tile (key t of the piece) as the dp4a kernel
  // computes it: its group dots from the staged integers, unscaled by their shifts (exactly: every
  // product carries them), combined as sum_g D_g 2^E_g under its exponent condition; otherwise its
  // fp32 path from qi and the key row.
  auto exact_term = [&](int w, int h, int tl, int64_t t) -> float {
    const int* e = qe + (w * IH + h) * G;
    const uint32_t sb = kek[tl], a_sh = qa[w * IH + h], b_sh = kb[tl];
    int emin = 1 << 20, emax = -(1 << 20);
    bool fp4 = true;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      fp4 = fp4 && e[g] != kNotFp4;
      if (e[g] == kExcluded) continue;
      const int E = e[g] + static_cast<int>((sb >> (8 * g)) & 255u) - 128;
      emin = min(emin, E);
      emax = max(emax, E);
    }
    const float wv = hw[w * IH + h];
    if (!(fp4 && (emax < emin || (emax - emin <= 9 && emin >= -149 && emax <= 100))))
      return general_term<IHD>(qi + ((r0 + w) * IH + h) * IHD, pieces[s_piece[w]].ikeys + t * RB, wv);
    const int mt = tl >> 4, kr = tl & 15;
    float dot = 0.0f;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      int acc = 0;
#pragma unroll
      for (int wd = 0; wd < 8; ++wd)
        acc = __dp4a(static_cast<int>(kfrag[((mt * G + g) * 32 + (kr & 7) * 4 + (wd & 3)) * 4 + (kr >> 3) + 2 * (wd >> 2)]),
                     static_cast<int>(bfrag_word(w, h, g, wd)), acc);
      acc >>= static_cast<int>(((a_sh >> (8 * g)) & 255u) + ((b_sh >> (8 * g)) & 255u));
      if (e[g] != kExcluded)
        dot = __fadd_rn(dot, __fmul_rn(static_cast<float>(acc), pow2_exact(e[g] + static_cast<int>((sb >> (8 * g)) & 255u) - 128)));
    }
    float v = rb(dot);
    v = v < 0.0f ? 0.0f : v;
    return rb(__fmul_rn(v, wv));
  };

  // Every piece of the block's rows in turn (one for a prefill chunk), its key tiles of this chunk.
  for (int lead = 0; lead < kMmaRows; ++lead) {
    const int p = s_piece[lead];
    bool seen = p < 0;
    for (int u = 0; u < lead; ++u) seen = seen || s_piece[u] == p;
    if (seen) continue;
    int64_t kmax = 0;
    int np = 0;  // rows of the piece
    for (int u = 0; u < kMmaRows; ++u)
      if (s_piece[u] == p) {
        ++np;
        if (s_lc[u] > kmax) kmax = s_lc[u];
      }
    const uint8_t* keys = pieces[p].ikeys;
    for (int64_t t0 = k_begin; t0 < k_end && t0 < kmax; t0 += kMmaKeys) {
      const int nk = static_cast<int>(kmax - t0 < kMmaKeys ? kmax - t0 : kMmaKeys);
      __syncthreads();  // the previous tile's readers are done
      {
        const uint8_t* src = keys + t0 * RB;
        const int nb = nk * RB;
        int done = 0;
        if ((reinterpret_cast<uintptr_t>(src) & 15) == 0) {
          for (int i = threadIdx.x; i < nb / 16; i += kMmaThreads)
            reinterpret_cast<uint4*>(raw)[i] = reinterpret_cast<const uint4*>(src)[i];
          done = nb & ~15;
        } else if ((reinterpret_cast<uintptr_t>(src) & 3) == 0) {
          for (int i = threadIdx.x; i < nb / 4; i += kMmaThreads)
            reinterpret_cast<uint32_t*>(raw)[i] = reinterpret_cast<const uint32_t*>(src)[i];
          done = nb & ~3;
        }
        for (int i = done + threadIdx.x; i < nb; i += kMmaThreads) raw[i] = src[i];
      }
      __syncthreads();
      if (threadIdx.x < kMmaKeys) {  // per key: on the integer path or not, its scale, the groups' shifts
        const int t = threadIdx.x;
        float pk = 1.0f;  // keys past the tile: zeros on the integer path
        uint32_t sh = 0, sb = 0;
        if (t < nk) {
          // A group whose 32 codes are all (+-)0 adds exactly 0 at any scale: its exponent is left out of the
          // span and its shift is 0 (zero-valued rows, scale byte 0, stay on the integer path).
          int e[G], lo = 1 << 20, hi = -(1 << 20);
          bool zero[G];
#pragma unroll
          for (int g = 0; g < G; ++g) {
            sb |= static_cast<uint32_t>(raw[t * RB + IHD / 2 + g]) << (8 * g);
            e[g] = static_cast<int>(raw[t * RB + IHD / 2 + g]) - 128;
            uint32_t mag = 0;
            for (int i = 0; i < 16; ++i) mag |= raw[t * RB + 16 * g + i] & 0x77u;
            zero[g] = mag == 0;
            if (zero[g]) continue;
            lo = min(lo, e[g]);
            hi = max(hi, e[g]);
          }
          if (lo > hi) lo = hi = 0;  // every group zero: the dot is 0
          const bool good = hi - lo <= 3 && lo >= -64 && lo <= 40;
          pk = good ? pow2_exact(lo) : 0.0f;
#pragma unroll
          for (int g = 0; g < G; ++g)
            if (good && !zero[g]) sh |= static_cast<uint32_t>(e[g] - lo) << (8 * g);
        }
        kpk[t] = pk;
        kb[t] = sh;
        kek[t] = sb;
      }
      __syncthreads();
      // A fragments, one 16-byte entry per (16-key tile, group, lane): keys g, g+8 of the tile,
      // elements 4c..4c+3 and 16+4c..16+4c+3 of the group.
      for (int task = threadIdx.x; task < (kMmaKeys / 16) * G * 32; task += kMmaThreads) {
        const int ln = task & 31, ks = (task >> 5) % G, mt = (task >> 5) / G;
        const int k0 = mt * 16 + (ln >> 2), c = ln & 3;
        uint32_t v[4];
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int k = k0 + 8 * hf;
          uint32_t lo = 0, hi = 0;
          if (k < nk) {
            const uint8_t* b8 = raw + k * RB + 16 * ks + 2 * c;
            const int b = static_cast<int>((kb[k] >> (8 * ks)) & 255u);
            lo = e2m1x4_to_i8x4_shl(b8[0] | (uint32_t{b8[1]} << 8), b);
            hi = e2m1x4_to_i8x4_shl(b8[8] | (uint32_t{b8[9]} << 8), b);
          }
          v[hf] = lo;
          v[2 + hf] = hi;
        }
        *reinterpret_cast<uint4*>(kfrag + task * 4) = make_uint4(v[0], v[1], v[2], v[3]);
      }
      __syncthreads();
      // Work units (row of the piece, 32 keys of the tile), unit pt * np + ri for the piece's row ri,
      // spread over the warps: a warp keeps its row when np divides 8 (one piece: row = warp), and a
      // block with fewer rows of the piece than warps still uses them. Per unit, per 16-key tile and
      // head block the MMAs, the terms to the warp's scratch, then lane l adds key l's terms in head order.
      for (int unit = warp; unit < np * (kMmaKeys / 32); unit += kMmaRows) {
        const int ri = unit % np, pt = unit / np;
        int w = 0;
        for (int u = 0, k = 0; u < kMmaRows; ++u)
          if (s_piece[u] == p) {
            if (k == ri) w = u;
            ++k;
          }
        const int64_t my_lc = s_lc[w], r = r0 + w, tb = t0 + 32 * pt;
        if (tb >= my_lc) continue;
        float s = 0.0f;
        for (int hb = 0; hb < NHB; ++hb) {
          if (NHB > 1 || b_row != w) {
            load_b(w, hb);
            b_row = w;
          }
          const int hoff = w * IH + hb * 32 + 8 * c4;
#pragma unroll
          for (int mh = 0; mh < 2; ++mh) {
            const int mt = 2 * pt + mh;
            int acc[4][4];
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
              for (int i = 0; i < 4; ++i) acc[j][i] = kMagicBits;
#pragma unroll
            for (int ks = 0; ks < G; ++ks) {
              const uint4 a = *reinterpret_cast<const uint4*>(kfrag + ((mt * G + ks) * 32 + lane) * 4);
#pragma unroll
              for (int j = 0; j < 4; ++j) mma_s8(acc[j], a, bq[ks][2 * j], bq[ks][2 * j + 1]);
            }
            float sq[8], nq[8], wv[8];
#pragma unroll
            for (int i = 0; i < 8; i += 4) {
              const float4 x = *reinterpret_cast<const float4*>(hsq + hoff + i);
              const float4 y = *reinterpret_cast<const float4*>(hnq + hoff + i);
              const float4 z = *reinterpret_cast<const float4*>(hw + hoff + i);
              sq[i] = x.x; sq[i + 1] = x.y; sq[i + 2] = x.z; sq[i + 3] = x.w;
              nq[i] = y.x; nq[i + 1] = y.y; nq[i + 2] = y.z; nq[i + 3] = y.w;
              wv[i] = z.x; wv[i + 1] = z.y; wv[i + 2] = z.z; wv[i + 3] = z.w;
            }
            // acc[j][2hf + e]: key 8hf + g4 of the tile, head 8c4 + 2j + e of the block.
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
              const int kl = 16 * mh + 8 * hf + g4;
              const float pk = kpk[32 * pt + kl];
              float term[8];
#pragma unroll
              for (int i = 0; i < 8; ++i) term[i] = mma_term(acc[i >> 1][2 * hf + (i & 1)], sq[i], nq[i], pk, wv[i]);
              float* dst = my_scr + kl * kScrStride + 8 * c4;
              *reinterpret_cast<float4*>(dst) = make_float4(term[0], term[1], term[2], term[3]);
              *reinterpret_cast<float4*>(dst + 4) = make_float4(term[4], term[5], term[6], term[7]);
            }
          }
          // Pairs off the integer path (keys with pk 0: all 32 heads, one per lane; heads off it: all keys,
          // one per lane), by the dp4a kernel's operations on the staged integers.
          const unsigned bad_keys = __ballot_sync(0xffffffffu, tb + lane < my_lc && kpk[32 * pt + lane] == 0.0f);
          const unsigned bad_heads = ~hgood[w * NHB + hb];
          if (bad_keys | bad_heads) {
            __syncwarp();  // the integer-path terms are written
            for (unsigned m = bad_keys; m; m &= m - 1) {
              const int kl = __ffs(m) - 1;
              my_scr[kl * kScrStride + lane] = exact_term(w, hb * 32 + lane, 32 * pt + kl, tb + kl);
            }
            if (tb + lane < my_lc && !((bad_keys >> lane) & 1u))
              for (unsigned m = bad_heads; m; m &= m - 1) {
                const int hh = __ffs(m) - 1;
                my_scr[lane * kScrStride + hh] = exact_term(w, hb * 32 + hh, 32 * pt + lane, tb + lane);
              }
            load_b(w, hb);  // again from shared memory: nothing of it live across the calls
          }
          __syncwarp();
          const float* mine = my_scr + lane * kScrStride;
#pragma unroll
          for (int i = 0; i < 32; i += 4) {
            const float4 x = *reinterpret_cast<const float4*>(mine + i);
            s = __fadd_rn(s, x.x);
            s = __fadd_rn(s, x.y);
            s = __fadd_rn(s, x.z);
            s = __fadd_rn(s, x.w);
          }
          __syncwarp();
        }
        const int64_t t = tb + lane;
        if (t < my_lc) score[r * stride + t] = rb(s);
      }
    }
  }
}

}  // namespace

namespace {

// -1: not yet read from DSV4_INDEX_MMA; else an IndexScoresImpl value.
std::atomic<int> g_index_impl{-1};

template <int IHD, int NHB>
cudaError_t launch_index_scores_mma(const float* qi, const float* wt, float wscale, const PieceDev* pieces,
                                    const int32_t* row_piece, const int64_t* pos, int64_t rows, int ratio, float* score,
                                    int64_t stride, int64_t max_lc, cudaStream_t s) {
  const int64_t row_tiles = (rows + kMmaRows - 1) / kMmaRows;
  const int64_t tiles = (max_lc + kMmaKeys - 1) / kMmaKeys;
  // Key tiles per block: each block prepares its rows' queries once (about a tile's work), so as
  // many tiles as keep every block slot of the device (2 per SM) busy in one wave, up to 32 (4096
  // keys) when there is more work; the tiles split evenly over the chunks.
  int dev = 0, sms = 132;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    sms = 132;
  const int64_t slots = 2 * static_cast<int64_t>(sms);
  int64_t per_chunk = (tiles * row_tiles + slots - 1) / slots;
  per_chunk = per_chunk < 1 ? 1 : per_chunk > 32 ? 32 : per_chunk;
  const int64_t chunks = (tiles + per_chunk - 1) / per_chunk;
  per_chunk = (tiles + chunks - 1) / chunks;
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(row_tiles));
  const int64_t shm = mma_shared_bytes(32 * NHB, IHD);
  auto kernel = index_scores_mma_kernel<IHD, NHB>;
  if (shm > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shm));
    if (e != cudaSuccess) return e;
  }
  kernel<<<grid, kMmaThreads, shm, s>>>(qi, wt, wscale, pieces, row_piece, pos, rows, ratio, score, stride,
                                        static_cast<int>(per_chunk));
  return cudaGetLastError();
}

}  // namespace

IndexScoresImpl index_scores_impl() {
  int v = g_index_impl.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* e = std::getenv("DSV4_INDEX_MMA");
    v = static_cast<int>(!e                      ? IndexScoresImpl::automatic
                         : std::strcmp(e, "0") == 0 ? IndexScoresImpl::dp4a
                         : std::strcmp(e, "1") == 0 ? IndexScoresImpl::tensor_core
                                                    : IndexScoresImpl::automatic);
    g_index_impl.store(v, std::memory_order_relaxed);
  }
  return static_cast<IndexScoresImpl>(v);
}

void set_index_scores_impl(IndexScoresImpl impl) { g_index_impl.store(static_cast<int>(impl), std::memory_order_relaxed); }

cudaError_t index_scores(const float* qi, const float* wt, float wscale, const PieceDev* pieces,
                         const int32_t* row_piece, const int64_t* pos, int64_t rows, int64_t IH, int64_t ihd,
                         int ratio, float* score, int64_t stride, int64_t max_lc, cudaStream_t s) {
  if (rows == 0 || max_lc == 0) return cudaSuccess;
  if (ihd != 32 && ihd != 64 && ihd != 128) return cudaErrorInvalidValue;
  // Tensor cores for 8 rows and more (the dp4a kernel's one thread per (row, key) wins below), for
  // 32 or 64 heads; both kernels give the same bits.
  const IndexScoresImpl impl = index_scores_impl();
  const bool mma_shape = (IH == 32 || IH == 64) && (rows + kMmaRows - 1) / kMmaRows <= 65535;
  if (mma_shape && impl != IndexScoresImpl::dp4a && (impl == IndexScoresImpl::tensor_core || rows >= kMmaMinRows)) {
    auto launch = [&](auto ihd_c, auto nhb_c) {
      return launch_index_scores_mma<decltype(ihd_c)::value, decltype(nhb_c)::value>(
          qi, wt, wscale, pieces, row_piece, pos, rows, ratio, score, stride, max_lc, s);
    };
    using I32 = std::integral_constant<int, 32>;
    using I64 = std::integral_constant<int, 64>;
    using I128 = std::integral_constant<int, 128>;
    using N1 = std::integral_constant<int, 1>;
    using N2 = std::integral_constant<int, 2>;
    if (IH == 32) return ihd == 32 ? launch(I32{}, N1{}) : ihd == 64 ? launch(I64{}, N1{}) : launch(I128{}, N1{});
    return ihd == 32 ? launch(I32{}, N2{}) : ihd == 64 ? launch(I64{}, N2{}) : launch(I128{}, N2{});
  }
  // Few short rows: four threads per key row (four times the blocks on the latency path); otherwise
  // one (each block's query preparation is then shared by 256 keys).
  const int split = rows * max_lc <= 16384 ? 4 : 1;
  const int64_t per_block = kScoreThreads / split;
  const dim3 grid(static_cast<unsigned>((max_lc + per_block - 1) / per_block), static_cast<unsigned>(rows));
  const size_t shm = (IH * ihd + ((IH + 3) & ~int64_t{3})) * sizeof(float) + IH * (ihd / 4) * 4 + IH * (ihd / 32) * 4 +
                     (split > 1 ? kScoreKeys * (IH + 1) * sizeof(float) : 0);
  auto launch = [&](auto kernel) -> cudaError_t {
    if (shm > 48 * 1024) {
      const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shm));
      if (e != cudaSuccess) return e;
    }
    kernel<<<grid, kScoreThreads, shm, s>>>(qi, wt, wscale, pieces, row_piece, pos, IH, ratio, score, stride, split);
    return cudaGetLastError();
  };
  switch (ihd) {
    case 32: return launch(index_scores_kernel<32>);
    case 64: return launch(index_scores_kernel<64>);
    default: return launch(index_scores_kernel<128>);
  }
}

}  // namespace dsv4::cuda
