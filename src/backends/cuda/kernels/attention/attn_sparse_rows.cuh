// Key lists of the sparse attention kernels (attn_sparse.cu, attn_sparse_fused.cu, attn_sparse_tc.cu): the launch
// arguments, entry idx of a row's list (window part, then the selected compressed rows), the raw
// loads / exact decoding of eight consecutive key elements in every row format, and the loop that
// stages such runs of keys into shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels/attention/attention_kernels.cuh"
#include "backends/cuda/kernels/attention/attn_device.cuh"
#include "backends/cuda/kernels/attention/attn_v4.cuh"

namespace dsv4::cuda::sparse {

using namespace attn;

// Eight fp32 values holding bf16 values -> their eight bf16 bit patterns (truncation: exact for such values).
__device__ __forceinline__ uint4 pack_bf16x8(const float* v) {
  uint4 r;
  r.x = (f32_bits(v[0]) >> 16) | (f32_bits(v[1]) & 0xffff0000u);
  r.y = (f32_bits(v[2]) >> 16) | (f32_bits(v[3]) & 0xffff0000u);
  r.z = (f32_bits(v[4]) >> 16) | (f32_bits(v[5]) & 0xffff0000u);
  r.w = (f32_bits(v[6]) >> 16) | (f32_bits(v[7]) & 0xffff0000u);
  return r;
}

enum : int { kInvalid = 0, kFresh = 1, kFp8 = 2, kFp4 = 3, kModel1 = 4 };

struct SparseArgs {
  const float* q;
  const float* kvn;
  const PieceDev* pieces;
  const int32_t* row_piece;
  const int64_t* pos;
  const int32_t* topk;
  const float* sink;
  const float* freqs;
  float* o;
  int64_t rows, H, d, W, cap, n_sel, G;
  float scale;
  int n_freq;
  CompFormat fmt;
  // V4 / 0731 lists (the tensor-core kernel only): the pieces as the V4 kernels see them, window and
  // compressed rows in the device's V4 row layout (kv_model1_row_bytes(d, rd); pieces unused).
  const PieceV4* pieces_v4 = nullptr;
  int64_t rd = 0;
};

// Window entry idx (< W) of the list of the row at position p in a piece (start, row0, ring): the call's fresh
// row (kvn) at or after the piece's start, else the ring row of `ring_row` bytes, of kind `stored`.
template <typename Piece>
__device__ __forceinline__ int window_entry(const SparseArgs& a, const Piece& pc, int64_t p, int64_t idx,
                                            int64_t ring_row, int stored, const void*& ptr) {
  const int64_t first = p - a.W + 1 > 0 ? p - a.W + 1 : 0;
  const int64_t qp = first + idx;
  if (qp > p) return kInvalid;
  if (qp >= pc.start) {
    ptr = a.kvn + (pc.row0 + qp - pc.start) * a.d;
    return kFresh;
  }
  ptr = pc.window + (qp % a.cap) * ring_row;
  return stored;
}

// Entry idx of row r's key list: its kind and the address of its key row. sel: topk[r, idx - W]
// for a compressed entry (loaded by the caller).
__device__ __forceinline__ int list_entry(const SparseArgs& a, const PieceDev& pc, int64_t p, int64_t idx,
                                          int32_t sel, const void*& ptr) {
  ptr = nullptr;
  if (idx < a.W) return window_entry(a, pc, p, idx, a.d + a.d / 32, kFp8, ptr);
  if (sel < 0) return kInvalid;
  if (a.fmt == CompFormat::fp8_ue8m0_32) {
    ptr = pc.comp.row(sel, a.d + a.d / 32);
    return kFp8;
  }
  ptr = pc.comp.row(sel, a.d / 2 + a.d / 16);
  return kFp4;
}

// list_entry for V4 lists: ring rows before the piece and every selected compressed row are V4 rows.
__device__ __forceinline__ int list_entry_v4(const SparseArgs& a, const PieceV4& pc, int64_t p, int64_t idx,
                                             int32_t sel, const void*& ptr) {
  ptr = nullptr;
  const int64_t rowb = kv_model1_row_bytes(a.d, a.rd);
  if (idx < a.W) return window_entry(a, pc, p, idx, rowb, kModel1, ptr);
  if (sel < 0) return kInvalid;
  ptr = pc.comp.row(sel, rowb);
  return kModel1;
}

// The raw bytes of eight consecutive elements k..k+7 (k a multiple of 8) of an entry's key, loaded
// apart from their decoding so that a thread can keep several loads in flight: fresh rows as
// 8 floats (a, b), FP8 as 8 codes (a.x, a.y) and the scale byte (a.z), FP4 as 8 nibbles (a.x) and
// the scale byte (a.z). Row strides of small test shapes (66 or 132 B FP8 rows) are not 8-byte
// multiples, hence the aligned-load check.
struct Raw8 {
  uint4 a, b;
};

__device__ __forceinline__ Raw8 raw8(int kind, const void* p, int64_t d, int64_t k) {
  Raw8 r{};
  if (kind == kFresh) {
    r.a = __ldg(reinterpret_cast<const uint4*>(static_cast<const float*>(p) + k));
    r.b = __ldg(reinterpret_cast<const uint4*>(static_cast<const float*>(p) + k + 4));
  } else if (kind == kFp8) {
    const uint8_t* row = static_cast<const uint8_t*>(p);
    if ((reinterpret_cast<uintptr_t>(row + k) & 7) == 0) {
      const uint2 c = __ldg(reinterpret_cast<const uint2*>(row + k));
      r.a.x = c.x; r.a.y = c.y;
    } else {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(row + k);  // rows are 2-byte aligned
      r.a.x = __ldg(h) | (uint32_t{__ldg(h + 1)} << 16);
      r.a.y = __ldg(h + 2) | (uint32_t{__ldg(h + 3)} << 16);
    }
    r.a.z = __ldg(row + d + (k >> 5));
  } else if (kind == kFp4) {
    const uint8_t* row = static_cast<const uint8_t*>(p);
    r.a.x = __ldg(reinterpret_cast<const uint32_t*>(row + (k >> 1)));
    r.a.z = __ldg(row + d / 2 + (k >> 4));
  }
  return r;
}

// Elements k..k+7 of a V4 row (the device layout of attn_v4.cu: nn = d - rd e4m3 codes, nn / 64 UE8M0
// scales, rd bf16, a pad byte): NoPE runs as FP8's fields (a.w = 0); RoPE runs as their 16 bytes in b
// (a.w = 1). In 8-byte aligned rows (d = 512: 584 bytes) the codes load as one 8-byte unit and the
// bf16 tail (at an odd offset) as aligned words shifted into place, never past the row's pad byte;
// other rows byte by byte. Any other kind: raw8.
__device__ __forceinline__ Raw8 raw8_v4(int kind, const void* p, int64_t d, int64_t nn, int64_t k) {
  if (kind != kModel1) return raw8(kind, p, d, k);
  Raw8 r{};
  const uint8_t* row = static_cast<const uint8_t*>(p);
  if (reinterpret_cast<uintptr_t>(row) & 7) {  // a row stride that is no multiple of 8 (d = 128: 194 bytes): bytes
    if (k < nn) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        r.a.x |= uint32_t{__ldg(row + k + i)} << (8 * i);
        r.a.y |= uint32_t{__ldg(row + k + 4 + i)} << (8 * i);
      }
      r.a.z = __ldg(row + nn + (k >> 6));
    } else {
      const uint8_t* t = row + nn + nn / 64 + 2 * (k - nn);
      uint32_t w[4] = {};
#pragma unroll
      for (int i = 0; i < 16; ++i) w[i / 4] |= uint32_t{__ldg(t + i)} << (8 * (i % 4));
      r.b = uint4{w[0], w[1], w[2], w[3]};
      r.a.w = 1;
    }
    return r;
  }
  if (k < nn) {
    const uint2 c = __ldg(reinterpret_cast<const uint2*>(row + k));
    r.a.x = c.x; r.a.y = c.y;
    r.a.z = __ldg(row + nn + (k >> 6));
    return r;
  }
  const uintptr_t at = reinterpret_cast<uintptr_t>(row + nn + nn / 64 + 2 * (k - nn));
  const uint32_t* w = reinterpret_cast<const uint32_t*>(at & ~uintptr_t{3});
  const uint32_t sh = static_cast<uint32_t>(at & 3) * 8, w0 = __ldg(w), w1 = __ldg(w + 1), w2 = __ldg(w + 2),
                 w3 = __ldg(w + 3), w4 = sh ? __ldg(w + 4) : 0u;
  r.b.x = __funnelshift_r(w0, w1, sh); r.b.y = __funnelshift_r(w1, w2, sh);
  r.b.z = __funnelshift_r(w2, w3, sh); r.b.w = __funnelshift_r(w3, w4, sh);
  r.a.w = 1;
  return r;
}

// raw8 (raw8_v4 for a V4 row, with d its nn) of a key row already copied into shared memory (row: its first
// byte, 8-byte aligned; only 8-byte aligned V4 rows are copied): the same fields from the same bytes, so
// decode8 gives the same values.
__device__ __forceinline__ Raw8 raw8_copied(int kind, const uint8_t* row, int64_t d, int64_t k) {
  Raw8 r{};
  if (kind == kModel1) {  // d is nn here; row 8-byte aligned, as in memory
    const int64_t nn = d;
    if (k < nn) {
      const uint2 c = *reinterpret_cast<const uint2*>(row + k);
      r.a.x = c.x; r.a.y = c.y;
      r.a.z = row[nn + (k >> 6)];
      return r;
    }
    const uintptr_t at = reinterpret_cast<uintptr_t>(row + nn + nn / 64 + 2 * (k - nn));
    const uint32_t* w = reinterpret_cast<const uint32_t*>(at & ~uintptr_t{3});
    const uint32_t sh = static_cast<uint32_t>(at & 3) * 8, w4 = sh ? w[4] : 0u;
    r.b.x = __funnelshift_r(w[0], w[1], sh); r.b.y = __funnelshift_r(w[1], w[2], sh);
    r.b.z = __funnelshift_r(w[2], w[3], sh); r.b.w = __funnelshift_r(w[3], w4, sh);
    r.a.w = 1;
    return r;
  }
  if (kind == kFp8) {
    const uint2 c = *reinterpret_cast<const uint2*>(row + k);
    r.a.x = c.x; r.a.y = c.y;
    r.a.z = row[d + (k >> 5)];
  } else if (kind == kFp4) {
    r.a.x = *reinterpret_cast<const uint32_t*>(row + (k >> 1));
    r.a.z = row[d / 2 + (k >> 4)];
  }
  return r;
}

// Decoded values of raw8 (zeros for an invalid entry).
__device__ __forceinline__ void decode8(int kind, const Raw8& r, float* v) {
  if (kind == kFresh) {
    v[0] = __uint_as_float(r.a.x); v[1] = __uint_as_float(r.a.y); v[2] = __uint_as_float(r.a.z);
    v[3] = __uint_as_float(r.a.w); v[4] = __uint_as_float(r.b.x); v[5] = __uint_as_float(r.b.y);
    v[6] = __uint_as_float(r.b.z); v[7] = __uint_as_float(r.b.w);
  } else if (kind == kFp8) {
    const float s = ue8m0_f(r.a.z);
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = e4m3_f((r.a.x >> (8 * i)) & 255u) * s;
#pragma unroll
    for (int i = 0; i < 4; ++i) v[4 + i] = e4m3_f((r.a.y >> (8 * i)) & 255u) * s;
  } else if (kind == kFp4) {
    const float s = e4m3_f(r.a.z);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = e2m1_f((r.a.x >> (4 * i)) & 15u) * s;
  } else if (kind == kModel1) {  // raw8_v4: e4m3 x UE8M0 (scale per 64), or bf16
    if (r.a.w) {
      const uint32_t w[4] = {r.b.x, r.b.y, r.b.z, r.b.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        v[2 * i] = __uint_as_float(w[i] << 16);
        v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
      }
    } else {
      const float s = ue8m0_f(r.a.z);
#pragma unroll
      for (int i = 0; i < 4; ++i) v[i] = e4m3_f((r.a.x >> (8 * i)) & 255u) * s;
#pragma unroll
      for (int i = 0; i < 4; ++i) v[4 + i] = e4m3_f((r.a.y >> (8 * i)) & 255u) * s;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = 0.0f;
  }
}

// Stages `total` runs of eight key elements into shared memory, the nt threads of the caller
// taking runs i = t0, t0 + nt, ... with KB raw loads in flight per thread: all KB issued (in u
// order), then each decoded and stored in the same order. at(i, ptr, k) gives run i's entry kind
// (kInvalid: nothing loaded, decoded as zeros), its key row ptr and first element k;
// store(i, kind, v) writes the decoded float v[8]. Only called for i < total.
template <int KB, typename At, typename Store>
__device__ __forceinline__ void stage_keys8(int t0, int nt, int total, int64_t d, At at, Store store) {
  for (int i0 = t0; i0 < total; i0 += KB * nt) {
    Raw8 raw[KB];
    int kd[KB];
#pragma unroll
    for (int u = 0; u < KB; ++u) {
      const int i = i0 + u * nt;
      const void* ptr = nullptr;
      int64_t k = 0;
      kd[u] = i < total ? at(i, ptr, k) : kInvalid;
      raw[u] = kd[u] != kInvalid ? raw8(kd[u], ptr, d, k) : Raw8{};
    }
#pragma unroll
    for (int u = 0; u < KB; ++u) {
      const int i = i0 + u * nt;
      if (i >= total) continue;
      float v[8];
      decode8(kd[u], raw[u], v);
      store(i, kd[u], v);
    }
  }
}

// The CUDA-core implementations behind sparse_attention (the oracle's arithmetic, bit for bit):
// scores then accumulation in two kernels over chunks of 64 rows (work: two_pass_work_floats), and
// the fused cluster kernel (one launch, no scratch).
int64_t two_pass_work_floats(int64_t rows, int64_t H, int64_t W, int64_t n_sel);
cudaError_t two_pass(const SparseArgs& a, float* work, cudaStream_t s);
cudaError_t fused(const SparseArgs& a, cudaStream_t s);
// The tensor-core kernel (attn_sparse_tc.cu): no scratch, any H, d in {64, 128, 256, 512}.
cudaError_t tensor_core(const SparseArgs& a, cudaStream_t s);
// The same over V4 lists (a.pieces_v4, V4 rows; attn_v4.cuh's v4_sparse_attention): d in {128, 512}, rd = 64.
cudaError_t tensor_core_v4(const SparseArgs& a, cudaStream_t s);

}  // namespace dsv4::cuda::sparse
