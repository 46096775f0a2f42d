// The ViT's bidirectional attention on tensor cores (vision_kernels.cuh attention): one CTA per 64 queries
// of one head of one image, four warps of 16 queries; every CTA walks all of the image's keys in tiles of 64,
// in order, with a streaming softmax. mma.sync m16n8k16 (bf16 in, f32 accumulate): S = Q Kᵀ over the head's
// 64 dimensions (exact products of the bf16 q and k), then O += P V with each probability carried as two bf16
// parts, so P keeps about 16 significant bits (the oracle's P is f32). A query's arithmetic depends on its image's keys and
// values alone, in a fixed order: never on the other images of a call or on the launch shape.
#include "backends/cuda/vision/vision_kernels.cuh"

#include <cmath>

#include "backends/cuda/kernels/attention/attn_mma.cuh"
#include "core/bf16.h"

namespace dsv4::cuda::vision {
namespace {

using attn::mma_bf16;

constexpr int kHead = 64;        // head width (the ViT's heads are all 64 wide)
constexpr int kQueries = 64;     // per CTA: 4 warps x 16
constexpr int kKeys = 64;        // per tile
constexpr int kPad = kHead + 8;  // shared row stride in bf16: 144 bytes, conflict-free fragment loads

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

__device__ __forceinline__ uint32_t ld32(const uint16_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

// Fragment layouts (lane = 4g + t): A[16 x 16] regs {(g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)};
// B[16 x 8] regs {(k 2t..2t+1, n g), (k 2t+8.., n g)}; C[16 x 8] {(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)}.
__global__ void __launch_bounds__(128) attention_kernel(const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
                                                        const uint16_t* __restrict__ v, int64_t n, int64_t H,
                                                        float* __restrict__ o) {
  __shared__ __align__(16) uint16_t ks[kKeys][kPad];
  __shared__ __align__(16) uint16_t vs[kKeys][kPad];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t h = blockIdx.y, stride = H * kHead;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kQueries + warp * 16 + g, r1 = r0 + 8;
  // This warp's 16 queries as A fragments over the 64 dimensions (4 steps of 16); zeros past n.
  uint32_t qa[4][4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const int d = 16 * kk + 2 * t;
    qa[kk][0] = r0 < n ? ld32(q + r0 * stride + h * kHead + d) : 0u;
    qa[kk][1] = r1 < n ? ld32(q + r1 * stride + h * kHead + d) : 0u;
    qa[kk][2] = r0 < n ? ld32(q + r0 * stride + h * kHead + d + 8) : 0u;
    qa[kk][3] = r1 < n ? ld32(q + r1 * stride + h * kHead + d + 8) : 0u;
  }
  float m0 = -INFINITY, m1 = -INFINITY;  // running maxima of rows g and g + 8
  float l0 = 0.f, l1 = 0.f;              // this thread's share of the rows' probability sums
  float acc[8][4];
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;

  for (int64_t k0 = 0; k0 < n; k0 += kKeys) {
    __syncthreads();  // the previous tile is no longer read
    for (int u = threadIdx.x; u < kKeys * (kHead / 8); u += blockDim.x) {
      const int row = u / (kHead / 8), c = u % (kHead / 8);
      const int64_t key = k0 + row;
      uint4 kv = make_uint4(0, 0, 0, 0), vv = kv;
      if (key < n) {
        kv = *reinterpret_cast<const uint4*>(k + key * stride + h * kHead + 8 * c);
        vv = *reinterpret_cast<const uint4*>(v + key * stride + h * kHead + 8 * c);
      }
      *reinterpret_cast<uint4*>(&ks[row][8 * c]) = kv;
      *reinterpret_cast<uint4*>(&vs[row][8 * c]) = vv;
    }
    __syncthreads();
    // Logits of the tile: 8 blocks of 8 keys.
    float s[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        mma_bf16(s[j], qa[kk], ld32(&ks[8 * j + g][16 * kk + 2 * t]), ld32(&ks[8 * j + g][16 * kk + 2 * t + 8]));
    }
    float mx0 = m0, mx1 = m1;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const bool valid = k0 + 8 * j + 2 * t + (e & 1) < n;
        s[j][e] = valid ? __fmul_rn(s[j][e], 0.125f) : -INFINITY;
        if (e < 2) mx0 = fmaxf(mx0, s[j][e]);
        else mx1 = fmaxf(mx1, s[j][e]);
      }
#pragma unroll
    for (int d = 1; d <= 2; d <<= 1) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, d));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, d));
    }
    // The tile's first key is valid, so both maxima are finite; rescale what came before.
    const float a0 = expf(__fsub_rn(m0, mx0)), a1 = expf(__fsub_rn(m1, mx1));
    m0 = mx0;
    m1 = mx1;
    l0 = __fmul_rn(l0, a0);
    l1 = __fmul_rn(l1, a1);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      acc[j][0] = __fmul_rn(acc[j][0], a0), acc[j][1] = __fmul_rn(acc[j][1], a0);
      acc[j][2] = __fmul_rn(acc[j][2], a1), acc[j][3] = __fmul_rn(acc[j][3], a1);
    }
    // Probabilities in f32, each split into two bf16 parts p = hi + lo (hi = bf16(p), lo = bf16(p − hi): about 16
    // significant bits, where one bf16 alone keeps 8), then O += P_hi V + P_lo V.
    uint32_t hi[8][2], lo[8][2];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float p[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) p[e] = expf(__fsub_rn(s[j][e], e < 2 ? m0 : m1));
      l0 = __fadd_rn(l0, __fadd_rn(p[0], p[1]));
      l1 = __fadd_rn(l1, __fadd_rn(p[2], p[3]));
      float h[4], r[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) h[e] = round_bf16(p[e]), r[e] = __fsub_rn(p[e], h[e]);
      hi[j][0] = pack_bf16x2(h[0], h[1]);
      hi[j][1] = pack_bf16x2(h[2], h[3]);
      lo[j][0] = pack_bf16x2(r[0], r[1]);
      lo[j][1] = pack_bf16x2(r[2], r[3]);
    }
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint32_t ah[4] = {hi[2 * kk][0], hi[2 * kk][1], hi[2 * kk + 1][0], hi[2 * kk + 1][1]};
      const uint32_t al[4] = {lo[2 * kk][0], lo[2 * kk][1], lo[2 * kk + 1][0], lo[2 * kk + 1][1]};
      const int key = 16 * kk + 2 * t;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int col = 8 * j + g;
        const uint32_t b0 = static_cast<uint32_t>(vs[key][col]) | static_cast<uint32_t>(vs[key + 1][col]) << 16;
        const uint32_t b1 = static_cast<uint32_t>(vs[key + 8][col]) | static_cast<uint32_t>(vs[key + 9][col]) << 16;
        mma_bf16(acc[j], ah, b0, b1);
        mma_bf16(acc[j], al, b0, b1);
      }
    }
  }
  // The rows' sums over their quad (a fixed xor tree), then O / sum rounded to bf16.
#pragma unroll
  for (int d = 1; d <= 2; d <<= 1) {
    l0 = __fadd_rn(l0, __shfl_xor_sync(0xffffffffu, l0, d));
    l1 = __fadd_rn(l1, __shfl_xor_sync(0xffffffffu, l1, d));
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int64_t col = h * kHead + 8 * j + 2 * t;
    if (r0 < n) {
      o[r0 * stride + col] = round_bf16(__fdiv_rn(acc[j][0], l0));
      o[r0 * stride + col + 1] = round_bf16(__fdiv_rn(acc[j][1], l0));
    }
    if (r1 < n) {
      o[r1 * stride + col] = round_bf16(__fdiv_rn(acc[j][2], l1));
      o[r1 * stride + col + 1] = round_bf16(__fdiv_rn(acc[j][3], l1));
    }
  }
}

}  // namespace

cudaError_t attention(const uint16_t* q, const uint16_t* k, const uint16_t* v, int64_t n, int64_t H, float* o,
                      cudaStream_t s) {
  if (H < 1 || H > 65535) return cudaErrorInvalidValue;
  if (n > 0)
    attention_kernel<<<dim3(static_cast<unsigned>((n + kQueries - 1) / kQueries), static_cast<unsigned>(H)), 128, 0,
                       s>>>(q, k, v, n, H, o);
  return cudaGetLastError();
}

}  // namespace dsv4::cuda::vision
