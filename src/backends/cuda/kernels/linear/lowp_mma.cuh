// Tensor-core building blocks of the FP8 / FP4 linears: "swap AB" mma.m16n8k16 (f16 in, f32
// accumulate) with weight columns on the M side and activation rows on the N side, K in 32-wide
// chunks whose power-of-two block scales are applied to each chunk's fp32 partial outside the MMA.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backends/cuda/kernels/linear/lowp_tile.cuh"

namespace dsv4::cuda::lowp {

// The arithmetic of one output element y[row, col] (the definition every kernel reproduces bit for
// bit, whatever its tiling or row count):
//   K splits into kw slices of whole act blocks (k_slices, slice_begin: functions of K only);
//   in slice s, acc_s = 0, then for each 32-wide chunk c in increasing order
//     d = mma(A1 B1, mma(A0 B0, 0))          (the chunk's 32 exact products; fixed fragment layout)
//     acc_s = fma(d, xs[row, c] * (ws[col, c] * kFactor), acc_s)   (power-of-two scales: exact)
//   tot = acc_0, then tot = tot + acc_s for s = 1 .. kw-1;  y = round_bf16(tot).
// f16 holds every e4m3 value and every e2m1 value times 2^-14 exactly, so the products are exact.
constexpr int kChunk = 32;

__host__ __device__ inline int slice_begin(int s, int units, int kw) {  // s * units < 2^32
  return static_cast<int>((static_cast<uint32_t>(s) * static_cast<uint32_t>(units)) / static_cast<uint32_t>(kw));
}

// K slices of a weight `in` wide along K with `units` act blocks: one per kChunksPerSlice chunks, 1 to
// kMaxSlices, at most one per act block. A function of the logical K only, never of the output
// width, so a launch over a column slice (a tensor-parallel rank's rows of W) sums every element in
// the order the whole weight's launch does.
constexpr int kChunksPerSlice = 8;
constexpr int kMaxSlices = 16;  // warps per CTA of the row kernels
inline int k_slices(int64_t in, int units) {
  int64_t kw = in / kChunk / kChunksPerSlice;
  if (kw < 1) kw = 1;
  if (kw > kMaxSlices) kw = kMaxSlices;
  return static_cast<int>(kw < units ? kw : units);
}

// Fragment layout. Lane = 4 g + q. Thread (g, q) owns physical k = 8q .. 8q+7 of a chunk for
// weight columns g and g+8 (A) and activation row g (B); it receives D for columns g, g+8 and rows
// 2q, 2q+1. The 8 k's form 4 f16 pairs: MMA 0 takes pairs 0, 1 as its k (2q, 2q+1) and
// (2q+8, 2q+9), MMA 1 pairs 2, 3. FP8 pairs are (0,1) (2,3) (4,5) (6,7); FP4 pairs are (0,4) (1,5)
// (2,6) (3,7) (what one shift of a packed nibble word yields). Activations are staged in pair
// order, so one 16-byte shared load gives both MMAs' B registers.
template <Fmt F>
__host__ __device__ constexpr int pair_pos(int e) {
  if constexpr (F == Fmt::fp8) return e;
  else return e < 4 ? 2 * e : 2 * (e - 4) + 1;
}

// Slot order (the warpgroup GEMM's rows, lowp_wgmma.cuh): where pair-order position p of k-group q (k 8q ..
// 8q+7 of a chunk) sits among the chunk's 32 f16: pair p / 2 of the thread's four belongs to MMA p / 4 and
// its B register (p / 2) % 2, whose k slots are 2q, 2q+1 (the first) or 2q+8, 2q+9 (the second); a chunk
// holds MMA 0's 16 slots, then MMA 1's.
__host__ __device__ constexpr int slot_pos(int q, int p) { return 16 * (p >> 2) + 8 * ((p >> 1) & 1) + 2 * q + (p & 1); }

// One chunk's raw weight bits for columns g and g+8.
template <Fmt F> struct WFrag;
template <> struct WFrag<Fmt::fp8> {
  uint2 c0, c1;  // 8 e4m3 of column g / g+8
};
template <> struct WFrag<Fmt::fp4> {
  uint32_t c0, c1;  // 8 e2m1 nibbles of column g / g+8
};

// The scale row of column col of W in the scale bytes `scale` (W's own, or another expert's of the same
// shape), nullptr past W's columns; and log2 of W's chunks per scale block (scale_rows and
// scale_cols / 32 are powers of two, checked at launch).
__device__ __forceinline__ const uint8_t* scale_row(const LowpWeight& W, const uint8_t* scale, int64_t col) {
  return col < W.out ? scale + (col >> (__ffs(W.scale_rows) - 1)) * W.scale_stride : nullptr;
}
__device__ __forceinline__ int scale_shift(const LowpWeight& W) { return __ffs(W.scale_cols / kChunk) - 1; }

// Where one thread's weight bits and scales live: its 8 k's of chunk c for column g at
// p0 + c * kChunkBytes (column g + 8 at p1 + ...); the scale bytes of chunk c at s0[c >> sh] and
// s1[c >> sh] (sh = log2 of the chunks per scale block). Missing columns read as zero.
template <Fmt F>
struct WPtr {
  static constexpr int kChunkBytes = F == Fmt::fp8 ? 32 : 16;
  const uint8_t* p0;
  const uint8_t* p1;
  const uint8_t* s0;
  const uint8_t* s1;
  int sh;
  bool ok0, ok1;
  WPtr() = default;
  __device__ __forceinline__ WPtr(const LowpWeight& W, int64_t col0, int q) {
    ok0 = col0 < W.out, ok1 = col0 + 8 < W.out;
    p0 = W.w + col0 * W.row_bytes + (kChunkBytes / 4) * q;
    p1 = p0 + 8 * W.row_bytes;
    s0 = scale_row(W, W.scale, col0);  // nullptr only where ok0 / ok1 is false (never read)
    s1 = scale_row(W, W.scale, col0 + 8);
    sh = scale_shift(W);
  }
  __device__ __forceinline__ void scales(int c, float& ws0, float& ws1) const {
    ws0 = ok0 ? ue8m0_to_f32(__ldg(s0 + (c >> sh))) : 0.f;
    ws1 = ok1 ? ue8m0_to_f32(__ldg(s1 + (c >> sh))) : 0.f;
  }
};

__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xFFFFu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

// Nibbles j and j+4 of an e2m1 word as an f16x2 holding value * 2^-14 (s e1 e0 m placed as f16 bits
// s<<15 | (e1 e0 m)<<9; e = 0 lands on the f16 subnormal 0.5m * 2^-14).
__device__ __forceinline__ uint32_t e2m1_pair(uint32_t u, int j) {
  const uint32_t a = j == 3 ? (u >> 3) : (u << (9 - 4 * j));
  const uint32_t b = u << (12 - 4 * j);
  return (a & 0x0E000E00u) | (b & 0x80008000u);
}

// A registers of MMA 0 (a0[4]) and MMA 1 (a1[4]) from one chunk's weight bits.
template <Fmt F>
__device__ __forceinline__ void a_regs(const WFrag<F>& f, uint32_t (&a0)[4], uint32_t (&a1)[4]) {
  if constexpr (F == Fmt::fp8) {
    a0[0] = e4m3x2_to_f16x2(f.c0.x), a0[1] = e4m3x2_to_f16x2(f.c1.x);
    a0[2] = e4m3x2_to_f16x2(f.c0.x >> 16), a0[3] = e4m3x2_to_f16x2(f.c1.x >> 16);
    a1[0] = e4m3x2_to_f16x2(f.c0.y), a1[1] = e4m3x2_to_f16x2(f.c1.y);
    a1[2] = e4m3x2_to_f16x2(f.c0.y >> 16), a1[3] = e4m3x2_to_f16x2(f.c1.y >> 16);
  } else {
    a0[0] = e2m1_pair(f.c0, 0), a0[1] = e2m1_pair(f.c1, 0), a0[2] = e2m1_pair(f.c0, 1), a0[3] = e2m1_pair(f.c1, 1);
    a1[0] = e2m1_pair(f.c0, 2), a1[1] = e2m1_pair(f.c1, 2), a1[2] = e2m1_pair(f.c0, 3), a1[3] = e2m1_pair(f.c1, 3);
  }
}

// d = A B + c, m16n8k16, f16 inputs, f32 accumulate (sm_80+; every architecture this builds for).
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                         const float (&c)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#else
  __trap();
#endif
}

// One chunk: d = its 32 products for columns (g, g+8) x rows (2q, 2q+1); b = the staged pairs of
// activation row g (zero for absent rows).
template <Fmt F>
__device__ __forceinline__ void chunk_mma(const WFrag<F>& f, uint4 b, float (&d)[4]) {
  uint32_t a0[4], a1[4];
  a_regs<F>(f, a0, a1);
  const float z[4] = {0.f, 0.f, 0.f, 0.f};
  float t[4];
  mma16816(t, a0, b.x, b.y, z);
  mma16816(d, a1, b.z, b.w, t);
}

// acc = fma(d, xs_row * w_col, acc) for the thread's four (column, row) elements, w = ws_col * kFactor:
// d[0], d[1] column g rows 2q, 2q+1; d[2], d[3] column g+8.
__device__ __forceinline__ void scale_add_w(const float (&d)[4], float w0, float w1, float xs0, float xs1,
                                            float (&acc)[4]) {
  acc[0] = __fmaf_rn(d[0], __fmul_rn(xs0, w0), acc[0]);
  acc[1] = __fmaf_rn(d[1], __fmul_rn(xs1, w0), acc[1]);
  acc[2] = __fmaf_rn(d[2], __fmul_rn(xs0, w1), acc[2]);
  acc[3] = __fmaf_rn(d[3], __fmul_rn(xs1, w1), acc[3]);
}
template <Fmt F>
__device__ __forceinline__ void scale_add(const float (&d)[4], float ws0, float ws1, float xs0, float xs1,
                                          float (&acc)[4]) {
  scale_add_w(d, __fmul_rn(ws0, Traits<F>::kFactor), __fmul_rn(ws1, Traits<F>::kFactor), xs0, xs1, acc);
}

// act_quant (cpu::act_quant_row) of one quad (4 consecutive k, quad index `quad` of a row segment
// starting on an act block) given its block's amax: e4m3 codes as f16 into xq (the row segment),
// in pair order (kSlots: slot order, the segment starting on a chunk); the block's scale into
// xs[quad / group] by the block's first quad.
template <Fmt F, bool kSlots = false>
__device__ __forceinline__ void quant_quad(float4 v, float amax, unsigned quad, int gshift, int group, __half* xq,
                                           float* xs) {
  const uint8_t sb = fp8_ue8m0_scale(amax);
  const float s = ue8m0_to_f32(sb);
  // 1 / s for s = 2^(sb - 127), exactly: 2^(127 - sb), a normal float for sb <= 253; 2^-127 (subnormal)
  // for sb = 254; NaN for the NaN scale 255 (never chosen: fp8_ue8m0_scale clamps to 254)
  const float inv_s = sb <= 253   ? __uint_as_float(static_cast<uint32_t>(254 - sb) << 23)
                      : sb == 254 ? __uint_as_float(0x00400000u)
                                  : __uint_as_float(0x7FC00000u);
  if ((quad & (group - 1)) == 0) xs[quad >> gshift] = s;
  const __nv_fp8x2_storage_t c01 =
      __nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(v.x, inv_s), __fmul_rn(v.y, inv_s)), __NV_SATFINITE, __NV_E4M3);
  const __nv_fp8x2_storage_t c23 =
      __nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(v.z, inv_s), __fmul_rn(v.w, inv_s)), __NV_SATFINITE, __NV_E4M3);
  const __half2_raw h01 = __nv_cvt_fp8x2_to_halfraw2(c01, __NV_E4M3), h23 = __nv_cvt_fp8x2_to_halfraw2(c23, __NV_E4M3);
  __half* dst = xq + (quad / 2) * 8;  // the 8 k's of this quad's pair group
  const int e0 = (quad & 1) * 4;
  if constexpr (kSlots) {
    uint16_t* d16 = reinterpret_cast<uint16_t*>(xq + (quad / 8) * kChunk);
    const int qg = (quad / 2) & 3;
    d16[slot_pos(qg, pair_pos<F>(e0 + 0))] = h01.x, d16[slot_pos(qg, pair_pos<F>(e0 + 1))] = h01.y;
    d16[slot_pos(qg, pair_pos<F>(e0 + 2))] = h23.x, d16[slot_pos(qg, pair_pos<F>(e0 + 3))] = h23.y;
  } else if constexpr (F == Fmt::fp8) {
    *reinterpret_cast<uint2*>(dst + e0) = make_uint2(static_cast<uint32_t>(h01.x) | (static_cast<uint32_t>(h01.y) << 16),
                                                     static_cast<uint32_t>(h23.x) | (static_cast<uint32_t>(h23.y) << 16));
  } else {
    uint16_t* d16 = reinterpret_cast<uint16_t*>(dst);
    d16[pair_pos<F>(e0 + 0)] = h01.x, d16[pair_pos<F>(e0 + 1)] = h01.y;
    d16[pair_pos<F>(e0 + 2)] = h23.x, d16[pair_pos<F>(e0 + 3)] = h23.y;
  }
}

// act_quant (cpu::act_quant_row) of K range [k0, k0 + len) of R rows by one warp: codes as f16 in
// pair order, xq[r * stride + (k - k0)] (k's position within its 8 permuted by pair_pos), scales
// xs[r * ustride + (k - k0) / act_block]. len and k0 are multiples of act_block. One lane per 4
// elements; the act_block / 4 lanes of a block take its amax with xor shuffles (exact in any order).
template <Fmt F, typename RowPtr>
__device__ __forceinline__ void stage_warp(RowPtr row_ptr, int R, int64_t k0, int len, int act_block, __half* xq,
                                           int stride, float* xs, int ustride) {
  const int lane = threadIdx.x & 31;
  const int group = act_block / 4, gshift = __ffs(group) - 1;  // lanes per act block (8, 16, 32)
  const unsigned quads = static_cast<unsigned>(len / 4), total = static_cast<unsigned>(R) * quads;
  // item / quads as a multiply-high: exact for item * quads < 2^32 (item < 2^14, quads < 2^16).
  const unsigned magic = 0xFFFFFFFFu / quads + 1u;  // ceil(2^32 / quads) for quads >= 2 (here >= 8)
  constexpr int kBatch = 4;  // loads in flight per lane before any is used
  for (unsigned base = 0; base < total; base += 32 * kBatch) {  // warp-uniform trip counts (shuffles below)
    float4 v[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const unsigned item = base + 32 * j + lane, r = __umulhi(item, magic);
      v[j] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (item < total) v[j] = *reinterpret_cast<const float4*>(row_ptr(r) + k0 + 4 * (item - r * quads));
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      if (base + 32 * j >= total) break;  // warp-uniform
      const unsigned item = base + 32 * j + lane;
      const bool live = item < total;
      const unsigned r = live ? __umulhi(item, magic) : 0u, quad = live ? item - r * quads : 0u;
      float amax = fmaxf(fmaxf(fabsf(v[j].x), fabsf(v[j].y)), fmaxf(fabsf(v[j].z), fabsf(v[j].w)));
      for (int off = group / 2; off; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
      if (live) quant_quad<F>(v[j], amax, quad, gshift, group, xq + r * stride, xs + r * ustride);
    }
  }
  __syncwarp();
}


}  // namespace dsv4::cuda::lowp
