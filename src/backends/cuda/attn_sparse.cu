// Sparse attention with sinks over [window part ; selected compressed rows] (model-spec.md §3.6,
// K41 sparse_attn): one block per (row, head), the reference kernel's online softmax over blocks
// of 64 entries (bf16 P against the running max, fp32 denominator), then the inverse RoPE.
#include "backends/cuda/attention_kernels.cuh"
#include "backends/cuda/attn_device.cuh"

namespace dsv4::cuda {

namespace {

using namespace attn;
constexpr int kThreads = 256;

enum : int { kInvalid = 0, kFresh = 1, kFp8 = 2, kFp4 = 3 };

// Eight consecutive decoded elements k..k+7 (k a multiple of 8) of an entry's key. Row strides of
// small test shapes (66 or 132 B FP8 rows) are not 8-byte multiples, hence the aligned-load check.
__device__ __forceinline__ void load8(int kind, const void* p, int64_t d, int64_t k, float* v) {
  if (kind == kFresh) {
    const float4 a = *reinterpret_cast<const float4*>(static_cast<const float*>(p) + k);
    const float4 b = *reinterpret_cast<const float4*>(static_cast<const float*>(p) + k + 4);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
  } else if (kind == kFp8) {
    const uint8_t* row = static_cast<const uint8_t*>(p);
    uint32_t w0, w1;
    if ((reinterpret_cast<uintptr_t>(row + k) & 7) == 0) {
      const uint2 c = *reinterpret_cast<const uint2*>(row + k);
      w0 = c.x; w1 = c.y;
    } else {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(row + k);  // rows are 2-byte aligned
      w0 = h[0] | (uint32_t{h[1]} << 16);
      w1 = h[2] | (uint32_t{h[3]} << 16);
    }
    const float s = ue8m0_f(row[d + (k >> 5)]);
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = e4m3_f((w0 >> (8 * i)) & 255u) * s;
#pragma unroll
    for (int i = 0; i < 4; ++i) v[4 + i] = e4m3_f((w1 >> (8 * i)) & 255u) * s;
  } else {
    const uint8_t* row = static_cast<const uint8_t*>(p);
    const uint32_t c = *reinterpret_cast<const uint32_t*>(row + (k >> 1));
    const float s = e4m3_f(row[d / 2 + (k >> 4)]);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = e2m1_f((c >> (4 * i)) & 15u) * s;
  }
}

// Block per (row, head), the oracle's blocks of 64 entries in order. Per block: the entries' keys
// decoded into shared memory as bf16 (exact: every cached value is a bf16 value), the scores with
// the oracle's 8 partial sums (8 lanes per entry), the block max / alpha / bf16 P / fp32 P sum in
// entry order by warp 0, then each thread's two channels accumulated over the entries in order
// (acc * alpha, then + bf16(P) * k, no contraction).
// D: the head dim as a compile-time constant, so the fixed-order loops unroll and their shared
// memory loads pipeline (the arithmetic order is the same for every D).
template <int D>
__global__ void __launch_bounds__(kThreads)
sparse_attention_kernel(const float* q, const float* kvn, const PieceDev* pieces, const int32_t* row_piece,
                        const int64_t* pos, int64_t rows, int64_t H, int64_t W, int64_t cap,
                        const int32_t* topk, int64_t n_sel, CompFormat fmt, const float* sink, float scale,
                        const float* freqs, int n_freq, int64_t G, float* o) {
  constexpr int64_t d = D;
  extern __shared__ __align__(16) float smem[];
  const int64_t ks = d + 8;            // key row stride in bf16 elements (16 B pad against bank conflicts)
  float* qs = smem;                    // [d]
  uint16_t* keys = reinterpret_cast<uint16_t*>(qs + d);  // [64, ks] bf16 bits
  __shared__ float s_blk[64], p_blk[64];
  __shared__ int kind[64];
  __shared__ const void* kptr[64];
  __shared__ float s_stat[3];
  const int64_t h = blockIdx.x, r = blockIdx.y;
  const PieceDev pc = pieces[row_piece[r]];
  const int64_t p = pos[r];
  const int lane = threadIdx.x & 31;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) qs[i] = q[(r * H + h) * d + i];
  const int64_t first = p - W + 1 > 0 ? p - W + 1 : 0;
  const int comp_kind = fmt == CompFormat::fp8_ue8m0_32 ? kFp8 : kFp4;
  const int64_t comp_row = fmt == CompFormat::fp8_ue8m0_32 ? d + d / 32 : d / 2 + d / 16;
  const int64_t win_row = d + d / 32, n = W + n_sel, d8 = d / 8;
  const int64_t c = 2 * threadIdx.x;
  float a0 = 0.0f, a1 = 0.0f, m = -1e30f, sum = 0.0f;
  for (int64_t b0 = 0; b0 < n; b0 += 64) {
    const int len = static_cast<int>(n - b0 < 64 ? n - b0 : 64);
    for (int e = threadIdx.x; e < len; e += blockDim.x) {
      const int64_t idx = b0 + e;
      int kd = kInvalid;
      const void* ptr = nullptr;
      if (idx < W) {
        const int64_t qp = first + idx;
        if (qp <= p) {
          if (qp >= pc.start) { kd = kFresh; ptr = kvn + (pc.row0 + qp - pc.start) * d; }
          else { kd = kFp8; ptr = pc.window + (qp % cap) * win_row; }
        }
      } else {
        const int32_t t = topk[r * n_sel + (idx - W)];
        if (t >= 0) { kd = comp_kind; ptr = pc.comp + static_cast<int64_t>(t) * comp_row; }
      }
      kind[e] = kd;
      kptr[e] = ptr;
    }
    __syncthreads();
    // Stage: 8-element chunks of every valid entry, decoded to bf16 bits.
#pragma unroll 4
    for (int i = threadIdx.x; i < len * static_cast<int>(d8); i += kThreads) {
      const int e = i / static_cast<int>(d8);
      const int64_t k = (i % static_cast<int>(d8)) * 8;
      if (kind[e] == kInvalid) continue;
      float v[8];
      load8(kind[e], kptr[e], d, k, v);
      uint4 packed;
      packed.x = (f32_bits(v[0]) >> 16) | (f32_bits(v[1]) & 0xffff0000u);
      packed.y = (f32_bits(v[2]) >> 16) | (f32_bits(v[3]) & 0xffff0000u);
      packed.z = (f32_bits(v[4]) >> 16) | (f32_bits(v[5]) & 0xffff0000u);
      packed.w = (f32_bits(v[6]) >> 16) | (f32_bits(v[7]) & 0xffff0000u);
      *reinterpret_cast<uint4*>(keys + e * ks + k) = packed;
    }
    __syncthreads();
    // Scores: 8 lanes per entry, lane j the oracle's partial j.
    const int grp = threadIdx.x >> 3, j = threadIdx.x & 7, ngrp = blockDim.x >> 3;
    for (int e0 = 0; e0 < len; e0 += ngrp) {
      const int e = e0 + grp;
      const bool valid = e < len && kind[e] != kInvalid;
      float l = 0.0f;
      if (valid) {
        const uint16_t* kr = keys + e * ks + j;
        const float* qj = qs + j;
#pragma unroll
        for (int i = 0; i < D / 8; ++i) l = __fadd_rn(l, __fmul_rn(qj[8 * i], __uint_as_float(uint32_t{kr[8 * i]} << 16)));
      }
      l = combine8(l);
      if (j == 0 && e < len) s_blk[e] = valid ? __fmul_rn(l, scale) : __int_as_float(0xff800000);
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      const float s0 = lane < len ? s_blk[lane] : __int_as_float(0xff800000);
      const float s1 = lane + 32 < len ? s_blk[lane + 32] : __int_as_float(0xff800000);
      const float mb = warp_max(fmaxf(m, fmaxf(s0, s1)));
      const float p0 = exp_f(__fsub_rn(s0, mb)), p1 = exp_f(__fsub_rn(s1, mb));
      float psum = 0.0f;
#pragma unroll
      for (int t = 0; t < 32; ++t) {
        const float v = __shfl_sync(0xffffffffu, p0, t);
        if (t < len) psum = __fadd_rn(psum, v);
      }
#pragma unroll
      for (int t = 0; t < 32; ++t) {
        const float v = __shfl_sync(0xffffffffu, p1, t);
        if (32 + t < len) psum = __fadd_rn(psum, v);
      }
      p_blk[lane] = rb(p0);
      p_blk[lane + 32] = rb(p1);
      if (lane == 0) {
        const float alpha = exp_f(__fsub_rn(m, mb));
        s_stat[0] = alpha;
        s_stat[1] = __fadd_rn(__fmul_rn(sum, alpha), psum);
        s_stat[2] = mb;
      }
    }
    __syncthreads();
    const float alpha = s_stat[0];
    sum = s_stat[1];
    m = s_stat[2];
    if (c < d) {
      a0 = __fmul_rn(a0, alpha);
      a1 = __fmul_rn(a1, alpha);
#pragma unroll 8
      for (int e = 0; e < len; ++e) {
        if (kind[e] == kInvalid) continue;
        const uint32_t k2 = *reinterpret_cast<const uint32_t*>(keys + e * ks + c);
        a0 = __fadd_rn(a0, __fmul_rn(p_blk[e], __uint_as_float(k2 << 16)));
        a1 = __fadd_rn(a1, __fmul_rn(p_blk[e], __uint_as_float(k2 & 0xffff0000u)));
      }
    }
    __syncthreads();
  }
  sum = __fadd_rn(sum, exp_f(__fsub_rn(sink[h], m)));
  // o = bf16(acc / sum), then the inverse RoPE of the tail at p (qs reused as the output row).
  if (c < d) {
    qs[c] = rb(a0 / sum);
    qs[c + 1] = rb(a1 / sum);
  }
  __syncthreads();
  for (int jf = threadIdx.x; jf < n_freq; jf += blockDim.x) {
    float cs, sn;
    rope_cs(p, freqs[jf], cs, sn);
    float* pr = qs + d - 2 * n_freq + 2 * jf;
    rope_pair(pr[0], pr[1], cs, -sn);
  }
  __syncthreads();
  const int64_t hpg = H / G, g = h / hpg, hh = h % hpg;
  float* out = o + (g * rows + r) * hpg * d + hh * d;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) out[i] = qs[i];
}

}  // namespace

cudaError_t sparse_attention(const float* q, const float* kvn, const PieceDev* pieces, const int32_t* row_piece,
                             const int64_t* pos, int64_t rows, int64_t H, int64_t d, int64_t W, int64_t cap,
                             const int32_t* topk, int64_t n_sel, CompFormat fmt, const float* sink, float scale,
                             const float* freqs, int n_freq, int64_t G, float* o, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (d > 2 * kThreads || d % 32 || H % G) return cudaErrorInvalidValue;
  const size_t shm = d * sizeof(float) + 64 * (d + 8) * sizeof(uint16_t);
  const dim3 grid(static_cast<unsigned>(H), static_cast<unsigned>(rows));
  auto launch = [&](auto kernel) -> cudaError_t {
    if (shm > 48 * 1024) {
      const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shm));
      if (e != cudaSuccess) return e;
    }
    kernel<<<grid, kThreads, shm, s>>>(q, kvn, pieces, row_piece, pos, rows, H, W, cap, topk, n_sel, fmt, sink, scale,
                                       freqs, n_freq, G, o);
    return cudaGetLastError();
  };
  switch (d) {
    case 64: return launch(sparse_attention_kernel<64>);
    case 128: return launch(sparse_attention_kernel<128>);
    case 256: return launch(sparse_attention_kernel<256>);
    case 512: return launch(sparse_attention_kernel<512>);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace dsv4::cuda
