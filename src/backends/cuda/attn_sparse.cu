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

// Eight consecutive decoded elements k..k+7 (k a multiple of 8) of an entry's key.
__device__ __forceinline__ void load8(int kind, const void* p, int64_t d, int64_t k, float* v) {
  if (kind == kFresh) {
    const float4 a = *reinterpret_cast<const float4*>(static_cast<const float*>(p) + k);
    const float4 b = *reinterpret_cast<const float4*>(static_cast<const float*>(p) + k + 4);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
  } else if (kind == kFp8) {
    const uint8_t* row = static_cast<const uint8_t*>(p);
    const uint2 c = *reinterpret_cast<const uint2*>(row + k);
    const float s = ue8m0_f(row[d + (k >> 5)]);
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = e4m3_f((c.x >> (8 * i)) & 255u) * s;
#pragma unroll
    for (int i = 0; i < 4; ++i) v[4 + i] = e4m3_f((c.y >> (8 * i)) & 255u) * s;
  } else {
    const uint8_t* row = static_cast<const uint8_t*>(p);
    const uint32_t c = *reinterpret_cast<const uint32_t*>(row + (k >> 1));
    const float s = e4m3_f(row[d / 2 + (k >> 4)]);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = e2m1_f((c >> (4 * i)) & 15u) * s;
  }
}

// Elements c, c+1 (c even) of an entry's key.
__device__ __forceinline__ float2 load2(int kind, const void* p, int64_t d, int64_t c) {
  if (kind == kFresh) return *reinterpret_cast<const float2*>(static_cast<const float*>(p) + c);
  const uint8_t* row = static_cast<const uint8_t*>(p);
  if (kind == kFp8) {
    const uint32_t b = *reinterpret_cast<const uint16_t*>(row + c);
    const float s = ue8m0_f(row[d + (c >> 5)]);
    return make_float2(e4m3_f(b & 255u) * s, e4m3_f(b >> 8) * s);
  }
  const uint32_t b = row[c >> 1];
  const float s = e4m3_f(row[d / 2 + (c >> 4)]);
  return make_float2(e2m1_f(b & 15u) * s, e2m1_f(b >> 4) * s);
}

// Block per (row, head). Phase 1: every entry's score (one thread per entry, the oracle's 8 partial
// sums). Phase 2: per 64-block maxima, the running max and alpha of each block, bf16 P, the fp32
// P sums in entry order and the denominator recursion. Phase 3: each thread's two channels
// accumulated over the entries in order (acc * alpha at each block, + bf16(P) * k, no contraction).
// Decoding is exact, so the values do not depend on where a key is decoded.
__global__ void __launch_bounds__(kThreads)
sparse_attention_kernel(const float* q, const float* kvn, const PieceDev* pieces, const int32_t* row_piece,
                        const int64_t* pos, int64_t rows, int64_t H, int64_t d, int64_t W, int64_t cap,
                        const int32_t* topk, int64_t n_sel, CompFormat fmt, const float* sink, float scale,
                        const float* freqs, int n_freq, int64_t G, float* o) {
  extern __shared__ __align__(16) float smem[];
  const int64_t n = W + n_sel, nb = (n + 63) / 64;
  float* qs = smem;                    // [d]
  float* sc = qs + d;                  // [n] scores, then fp32 P
  float* pb = sc + n;                  // [n] bf16(P)
  float* bstat = pb + n;               // [nb] block max -> running max; [nb] alpha; [nb] P sums
  float* alpha = bstat + nb;
  float* psum = alpha + nb;
  int* kind = reinterpret_cast<int*>(psum + nb);                        // [n]
  const void** kptr = reinterpret_cast<const void**>(((reinterpret_cast<uintptr_t>(kind + n) + 15) & ~uintptr_t{15}));
  __shared__ float s_sum;
  const int64_t h = blockIdx.x, r = blockIdx.y;
  const PieceDev pc = pieces[row_piece[r]];
  const int64_t p = pos[r];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) qs[i] = q[(r * H + h) * d + i];
  const int64_t first = p - W + 1 > 0 ? p - W + 1 : 0;
  const int comp_kind = fmt == CompFormat::fp8_ue8m0_32 ? kFp8 : kFp4;
  const int64_t comp_row = fmt == CompFormat::fp8_ue8m0_32 ? d + d / 32 : d / 2 + d / 16;
  const int64_t win_row = d + d / 32;
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
    int kd = kInvalid;
    const void* ptr = nullptr;
    if (e < W) {
      const int64_t qp = first + e;
      if (qp <= p) {
        if (qp >= pc.start) { kd = kFresh; ptr = kvn + (pc.row0 + qp - pc.start) * d; }
        else { kd = kFp8; ptr = pc.window + (qp % cap) * win_row; }
      }
    } else {
      const int32_t t = topk[r * n_sel + (e - W)];
      if (t >= 0) { kd = comp_kind; ptr = pc.comp + static_cast<int64_t>(t) * comp_row; }
    }
    kind[e] = kd;
    kptr[e] = ptr;
  }
  __syncthreads();
  // Phase 1.
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
    const int kd = kind[e];
    float s = __int_as_float(0xff800000);
    if (kd != kInvalid) {
      float l[8] = {};
      for (int64_t k = 0; k < d; k += 8) {
        float v[8];
        load8(kd, kptr[e], d, k, v);
        const float4 qa = *reinterpret_cast<const float4*>(qs + k), qb = *reinterpret_cast<const float4*>(qs + k + 4);
        const float qv[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
        for (int j = 0; j < 8; ++j) l[j] = __fadd_rn(l[j], __fmul_rn(qv[j], v[j]));
      }
      const float dot = __fadd_rn(__fadd_rn(__fadd_rn(l[0], l[1]), __fadd_rn(l[2], l[3])),
                                  __fadd_rn(__fadd_rn(l[4], l[5]), __fadd_rn(l[6], l[7])));
      s = __fmul_rn(dot, scale);
    }
    sc[e] = s;
  }
  __syncthreads();
  // Phase 2.
  for (int64_t b = warp; b < nb; b += nwarps) {
    const int64_t e0 = b * 64 + lane, e1 = e0 + 32;
    float mx = fmaxf(e0 < n ? sc[e0] : __int_as_float(0xff800000), e1 < n ? sc[e1] : __int_as_float(0xff800000));
    mx = warp_max(mx);
    if (lane == 0) bstat[b] = mx;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = -1e30f;
    for (int64_t b = 0; b < nb; ++b) {
      const float mb = fmaxf(m, bstat[b]);
      alpha[b] = exp_f(__fsub_rn(m, mb));
      bstat[b] = mb;
      m = mb;
    }
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
    const float pe = exp_f(__fsub_rn(sc[e], bstat[e >> 6]));
    sc[e] = pe;
    pb[e] = rb(pe);
  }
  __syncthreads();
  for (int64_t b = warp; b < nb; b += nwarps) {
    const int64_t e0 = b * 64 + lane, e1 = e0 + 32;
    const float p0 = e0 < n ? sc[e0] : 0.0f, p1 = e1 < n ? sc[e1] : 0.0f;
    const int len = static_cast<int>(n - b * 64 < 64 ? n - b * 64 : 64);
    float t = 0.0f;
    for (int i = 0; i < 32; ++i) {
      const float v = __shfl_sync(0xffffffffu, p0, i);
      if (i < len) t = __fadd_rn(t, v);
    }
    for (int i = 0; i < 32; ++i) {
      const float v = __shfl_sync(0xffffffffu, p1, i);
      if (32 + i < len) t = __fadd_rn(t, v);
    }
    if (lane == 0) psum[b] = t;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; ++b) sum = __fadd_rn(__fmul_rn(sum, alpha[b]), psum[b]);
    s_sum = __fadd_rn(sum, exp_f(__fsub_rn(sink[h], bstat[nb - 1])));
  }
  // Phase 3.
  const int64_t c = 2 * threadIdx.x;
  float a0 = 0.0f, a1 = 0.0f;
  if (c < d)
    for (int64_t b = 0; b < nb; ++b) {
      a0 = __fmul_rn(a0, alpha[b]);
      a1 = __fmul_rn(a1, alpha[b]);
      const int64_t e1 = (b + 1) * 64 < n ? (b + 1) * 64 : n;
      for (int64_t e = b * 64; e < e1; ++e) {
        const int kd = kind[e];
        if (kd == kInvalid) continue;
        const float2 k2 = load2(kd, kptr[e], d, c);
        a0 = __fadd_rn(a0, __fmul_rn(pb[e], k2.x));
        a1 = __fadd_rn(a1, __fmul_rn(pb[e], k2.y));
      }
    }
  __syncthreads();
  // o = bf16(acc / sum), then the inverse RoPE of the tail at p (qs reused as the output row).
  const float sum = s_sum;
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
  const int64_t n = W + n_sel, nb = (n + 63) / 64;
  const size_t shm = (d + 2 * n + 3 * nb + n) * sizeof(float) + 16 + n * sizeof(void*);
  if (shm > 200 * 1024) return cudaErrorInvalidValue;
  if (shm > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(sparse_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(shm));
    if (e != cudaSuccess) return e;
  }
  const dim3 grid(static_cast<unsigned>(H), static_cast<unsigned>(rows));
  sparse_attention_kernel<<<grid, kThreads, shm, s>>>(q, kvn, pieces, row_piece, pos, rows, H, d, W, cap, topk, n_sel,
                                                      fmt, sink, scale, freqs, n_freq, G, o);
  return cudaGetLastError();
}

}  // namespace dsv4::cuda
