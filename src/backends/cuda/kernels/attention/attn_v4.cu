// Kernels of V4 / 0731 attention (see attn_v4.cuh): query head norm, V4 row packing, the gated
// compressors with position bias, the Hadamard FP4 indexer side, descending top-k and sparse
// attention over V4 rows. Arithmetic as the oracle's float path (no contraction, fixed orders).
#include "backends/cuda/kernels/attention/attn_device.cuh"
#include "backends/cuda/kernels/attention/attn_v4.cuh"
#include "backends/cuda/kernels/attention/attn_sparse_rows.cuh"

namespace dsv4::cuda {

namespace {

using namespace attn;
constexpr int kThreads = 256;
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// One V4 row element k: e4m3 x UE8M0-per-64 over the nn = d - rd NoPE dims, bf16 after them.
__device__ __forceinline__ float v4_row_at(const uint8_t* row, int64_t nn, int64_t k) {
  if (k < nn) return e4m3_f(row[k]) * ue8m0_f(row[nn + k / 64]);
  const uint8_t* tail = row + nn + nn / 64 + 2 * (k - nn);
  return __uint_as_float((uint32_t{tail[0]} | (uint32_t{tail[1]} << 8)) << 16);
}

// Packs sh [d] (bf16 values) as a V4 row into out and replaces the NoPE dims by their QDQ; one
// warp per 64-element group, the e4m3 codes and scale of cpu::quant_fp8_group.
__device__ void pack_v4_shared(float* sh, int64_t d, int64_t rd, uint8_t* out) {
  const int64_t nn = d - rd;
  const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int64_t g = wp; g < nn / 64; g += nw) {
    const float a = sh[g * 64 + lane], b = sh[g * 64 + 32 + lane];
    const float amax = warp_max(fmaxf(fabsf(a), fabsf(b)));
    const uint8_t sb = ::dsv4::fp8_ue8m0_scale(amax);
    const float sv = ::dsv4::ue8m0_to_f32(sb), inv = 1.0f / sv;
    const uint8_t ca = ::dsv4::fp8_ue8m0_code(a, inv), cb = ::dsv4::fp8_ue8m0_code(b, inv);
    out[g * 64 + lane] = ca;
    out[g * 64 + 32 + lane] = cb;
    if (lane == 0) out[nn + g] = sb;
    sh[g * 64 + lane] = ::dsv4::e4m3_to_f32(ca) * sv;
    sh[g * 64 + 32 + lane] = ::dsv4::e4m3_to_f32(cb) * sv;
  }
  uint8_t* tail = out + nn + nn / 64;
  for (int64_t i = threadIdx.x; i < rd; i += blockDim.x) {
    const uint16_t b = ::dsv4::f32_to_bf16(sh[nn + i]);
    tail[2 * i] = static_cast<uint8_t>(b & 0xff);
    tail[2 * i + 1] = static_cast<uint8_t>(b >> 8);
  }
  if (threadIdx.x == 0) tail[2 * rd] = 0;
  __syncthreads();
}

// In place on sh [n] (n a power of two): butterflies in Sylvester order, then x n^-0.5 -> bf16.
__device__ void hadamard_shared(float* sh, int64_t n) {
  for (int64_t h = 1; h < n; h *= 2) {
    for (int64_t t = threadIdx.x; t < n / 2; t += blockDim.x) {
      const int64_t i = (t / h) * 2 * h + (t % h);
      const float a = sh[i], b = sh[i + h];
      sh[i] = __fadd_rn(a, b);
      sh[i + h] = __fsub_rn(a, b);
    }
    __syncthreads();
  }
  const float scale = static_cast<float>(1.0 / sqrt(static_cast<double>(n)));
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sh[i] = rb(__fmul_rn(sh[i], scale));
  __syncthreads();
}

// FP4 / UE8M0-per-32 packing of sh [n] into out (n/2 code bytes, then n/32 scales); sh receives
// the dequantized values.
__device__ void pack_fp4_shared(float* sh, int64_t n, uint8_t* out) {
  const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int64_t g = wp; g < n / 32; g += nw)
    sh[g * 32 + lane] = pack_fp4_ue8m0_group32(sh[g * 32 + lane], lane, out + g * 16, out + n / 2 + g);
  __syncthreads();
}

// RMSNorm of sh [n] in place (cpu::rmsnorm_row<float>).
__device__ void norm_shared(float* sh, int64_t n, const float* w, float eps, float* red) {
  const float ss = sum_squares8(sh, n, red);
  const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, static_cast<float>(n)), eps)));
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = __fmul_rn(sh[i], r);
    sh[i] = rb(w ? __fmul_rn(w[i], v) : v);
  }
  __syncthreads();
}

// Block per head: the bf16 squares formed by every thread into shared memory, then summed in
// order by thread 0 (the oracle's sequential sum).
__global__ void head_rms_kernel(float* q, int64_t hd, float eps) {
  extern __shared__ float sq[];  // [hd]
  float* v = q + static_cast<int64_t>(blockIdx.x) * hd;
  __shared__ float r_sh;
  for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) sq[i] = rb(__fmul_rn(v[i], v[i]));
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.0f;
    for (int64_t i = 0; i < hd; ++i) s = __fadd_rn(s, sq[i]);
    const float mean = rb(__fdiv_rn(s, static_cast<float>(hd)));
    const float var = rb(__fadd_rn(mean, eps));
    r_sh = rb(__fdiv_rn(1.0f, __fsqrt_rn(var)));
  }
  __syncthreads();
  const float r = r_sh;
  for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) v[i] = rb(__fmul_rn(v[i], r));
}

__global__ void pack_rows_kernel(float* x, int64_t d, int64_t rd, uint8_t* packed) {
  extern __shared__ float sh[];
  const int64_t r = blockIdx.x;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) sh[i] = x[r * d + i];
  __syncthreads();
  pack_v4_shared(sh, d, rd, packed + r * kv_model1_row_bytes(d, rd));
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) x[r * d + i] = sh[i];
}

__global__ void compress_kernel(const EmitDev* emit, const PieceV4* pieces, const float* kp, const float* gp, int64_t w,
                                bool overlap, int ratio, int64_t pcap, const float* ape, const float* norm, float eps,
                                const float* freqs, int n_freq, bool index_side, int64_t rd) {
  extern __shared__ float sh[];
  __shared__ float red[33];
  const EmitDev e = emit[blockIdx.x];
  if (e.row < 0) return;  // a padding entry (graph calls: lists of a fixed length)
  const PieceV4 pc = pieces[e.piece];
  const int64_t n = overlap ? w / 2 : w;
  const int slots = overlap ? 2 * ratio : ratio;
  const float* ring_kv = index_side ? pc.iproj_kv : pc.proj_kv;
  const float* ring_g = index_side ? pc.iproj_gate : pc.proj_gate;
  for (int64_t ch = threadIdx.x; ch < n; ch += blockDim.x) {
    // Slot s: (position, channel offset); overlap slots < ratio read the previous group.
    auto fetch = [&](int s, float& k, float& g) {
      int64_t q, off;
      if (overlap && s < ratio) {
        if (e.j == 0) { k = 0.0f; g = neg_inf(); return; }
        q = (e.j - 1) * ratio + s;
        off = 0;
      } else {
        q = e.j * ratio + (overlap ? s - ratio : s);
        off = overlap ? n : 0;
      }
      const int64_t c = off + ch;
      if (q >= pc.start) {
        const int64_t row = pc.row0 + q - pc.start;
        k = kp[row * w + c];
        g = gp[row * w + c];
      } else {
        k = ring_kv[(q % pcap) * w + c];
        g = ring_g[(q % pcap) * w + c];
      }
      g = __fadd_rn(g, ape[(q % ratio) * w + c]);
    };
    float k, g, mx = 0.0f;
    for (int s = 0; s < slots; ++s) {
      fetch(s, k, g);
      mx = s == 0 ? g : fmaxf(mx, g);
    }
    float sum = 0.0f;
    for (int s = 0; s < slots; ++s) {
      fetch(s, k, g);
      sum = __fadd_rn(sum, exp_f(__fsub_rn(g, mx)));
    }
    float v = 0.0f;
    for (int s = 0; s < slots; ++s) {
      fetch(s, k, g);
      v = __fadd_rn(v, __fmul_rn(k, __fdiv_rn(exp_f(__fsub_rn(g, mx)), sum)));
    }
    sh[ch] = rb(v);
  }
  __syncthreads();
  norm_shared(sh, n, norm, eps, red);
  const int64_t pos = e.j * ratio;
  for (int j = threadIdx.x; j < n_freq; j += blockDim.x) {
    float c, s;
    rope_cs(pos, freqs[j], c, s);
    float* p = sh + n - 2 * n_freq + 2 * j;
    rope_pair(p[0], p[1], c, s);
  }
  __syncthreads();
  if (index_side) {
    hadamard_shared(sh, n);
    pack_fp4_shared(sh, n, pc.ikeys.row(e.j, n / 2 + n / 32));
  } else {
    pack_v4_shared(sh, n, rd, pc.comp.row(e.j, kv_model1_row_bytes(n, rd)));
  }
}

__global__ void proj_ring_write_kernel(const PieceV4* pieces, const int32_t* row_piece, int64_t pcap, const float* kp,
                                       const float* gp, int64_t w, bool index_side) {
  const int64_t r = blockIdx.x;
  const PieceV4 pc = pieces[row_piece[r]];
  const int64_t i = r - pc.row0, keep = pc.T < pcap ? pc.T : pcap;
  if (i < pc.T - keep) return;
  const int64_t slot = (pc.start + i) % pcap;
  float* rk = index_side ? pc.iproj_kv : pc.proj_kv;
  float* rg = index_side ? pc.iproj_gate : pc.proj_gate;
  for (int64_t c = threadIdx.x; c < w; c += blockDim.x) {
    rk[slot * w + c] = kp[r * w + c];
    rg[slot * w + c] = gp[r * w + c];
  }
}

__global__ void window_write_kernel(const PieceV4* pieces, const int32_t* row_piece, int64_t cap, const uint8_t* packed,
                                    int64_t row_bytes) {
  const int64_t r = blockIdx.x;
  const PieceV4 pc = pieces[row_piece[r]];
  const int64_t i = r - pc.row0, keep = pc.T < cap ? pc.T : cap;
  if (i < pc.T - keep) return;
  const int64_t slot = (pc.start + i) % cap;
  for (int64_t b = threadIdx.x; b < row_bytes; b += blockDim.x) pc.window[slot * row_bytes + b] = packed[r * row_bytes + b];
}

__global__ void hadamard_fp4_kernel(float* x, int64_t hd) {
  extern __shared__ float sh[];  // [hd] values, then hd/2 + hd/32 bytes of codes
  float* v = x + static_cast<int64_t>(blockIdx.x) * hd;
  for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) sh[i] = v[i];
  __syncthreads();
  hadamard_shared(sh, hd);
  pack_fp4_shared(sh, hd, reinterpret_cast<uint8_t*>(sh + hd));
  for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) v[i] = sh[i];
}

// In place on topk[r] (topk_rows' selection, ascending rows, -1 after): the same rows ordered by
// (score descending, row ascending), the order cpu::select_topk_desc returns: a bitonic sort of
// the k entries padded to P (a power of two) in shared memory, the -1 entries last. The order is
// a strict total one on the valid entries (rows differ), so the result is the unique sorted list.
__global__ void order_desc_kernel(const float* score, int64_t stride, int64_t k, int P, int32_t* topk) {
  extern __shared__ float s_sc[];  // [P] scores, then [P] rows
  int32_t* s_row = reinterpret_cast<int32_t*>(s_sc + P);
  const int64_t r = blockIdx.x;
  int32_t* sel = topk + r * k;
  for (int i = threadIdx.x; i < P; i += blockDim.x) {
    const int32_t t = i < k ? sel[i] : -1;
    s_row[i] = t;
    s_sc[i] = t >= 0 ? score[r * stride + t] : 0.0f;
  }
  __syncthreads();
  auto before = [&](int a, int b) {  // entry a precedes entry b
    const int32_t ta = s_row[a], tb = s_row[b];
    if (ta < 0) return false;
    if (tb < 0) return true;
    return s_sc[a] > s_sc[b] || (s_sc[a] == s_sc[b] && ta < tb);
  };
  for (int size = 2; size <= P; size <<= 1) {
    for (int half = size >> 1; half > 0; half >>= 1) {
      for (int i = threadIdx.x; i < P / 2; i += blockDim.x) {
        const int lo = 2 * half * (i / half) + (i % half), hi = lo + half;
        const bool up = (lo & size) == 0;  // this run sorts in "before" order, else reversed
        if (up ? before(hi, lo) : before(lo, hi)) {
          const float sc = s_sc[lo];
          const int32_t t = s_row[lo];
          s_sc[lo] = s_sc[hi];
          s_row[lo] = s_row[hi];
          s_sc[hi] = sc;
          s_row[hi] = t;
        }
      }
      __syncthreads();
    }
  }
  for (int64_t i = threadIdx.x; i < k; i += blockDim.x) sel[i] = s_row[i];
}

__global__ void all_rows_kernel(const int64_t* pos, int ratio, int64_t width, int32_t* list) {
  const int64_t r = blockIdx.x, lc = (pos[r] + 1) / ratio;
  for (int64_t t = threadIdx.x; t < width; t += blockDim.x) list[r * width + t] = t < lc ? static_cast<int32_t>(t) : -1;
}

// Block per (head, row), kSparseThreads threads. Each block of 64 entries is first copied into
// shared memory (the packed rows by every thread, 8-byte loads issued together) and decoded there
// once (keys [64, d + 8]); then scores by 8 lanes per entry (the oracle's 8
// partial sums), the block's softmax statistics by warp 0 in entry order, and each thread's
// channels accumulated over the entries in order — the arithmetic of cpu::sparse_attend_head, the
// same float operations in the same order as reading the keys where they lie.
constexpr int kSparseThreads = 512;
constexpr int kSparseChunk = 64;

__host__ __device__ inline int64_t sparse_key_stride(int64_t d) { return d + 8; }  // 8 lanes x 4 entries: distinct banks
__host__ __device__ inline int64_t sparse_raw_stride(int64_t rowb) { return (rowb + 7) / 8 * 8; }

// Copies the packed rows kptr[e] (null: none) of one block of entries into raw [len, rowp] with
// every thread's loads of units U issued together (up to 8 in flight per thread).
template <typename U>
__device__ __forceinline__ void stage_rows(const uint8_t* const* kptr, int len, int rowb, uint8_t* raw, int rowp) {
  constexpr int kB = 8;
  const int words = rowb / static_cast<int>(sizeof(U)), n = len * words;
  for (int i0 = threadIdx.x; i0 < n; i0 += kB * blockDim.x) {
    U v[kB] = {};
#pragma unroll
    for (int u = 0; u < kB; ++u) {
      const int i = i0 + u * blockDim.x, e = i / words;
      if (i < n && kptr[e]) v[u] = reinterpret_cast<const U*>(kptr[e])[i - e * words];
    }
#pragma unroll
    for (int u = 0; u < kB; ++u) {
      const int i = i0 + u * blockDim.x, e = i / words;
      if (i < n && kptr[e]) reinterpret_cast<U*>(raw + e * rowp)[i - e * words] = v[u];
    }
  }
}

__global__ void __launch_bounds__(kSparseThreads)
sparse_v4_kernel(const float* q, const float* kvn, const PieceV4* pieces, const int32_t* row_piece, const int64_t* pos,
                 int64_t rows, int64_t H, int64_t d, int64_t rd, int64_t W, int64_t cap, const int32_t* sel,
                 int64_t n_sel, const float* sink, float scale, const float* freqs, int n_freq, int64_t G, float* o) {
  extern __shared__ float smem[];
  const int64_t ks = sparse_key_stride(d);
  float* keys = smem;                      // [64, ks]
  float* qs = smem + kSparseChunk * ks;    // [d]
  const int rowp = static_cast<int>(sparse_raw_stride(kv_model1_row_bytes(d, rd)));
  uint8_t* raw = reinterpret_cast<uint8_t*>(qs + d);  // [64, rowp] packed rows of the block
  __shared__ float s_blk[kSparseChunk], p_blk[kSparseChunk], s_stat[3];
  __shared__ const uint8_t* kptr[kSparseChunk];
  __shared__ const float* fptr[kSparseChunk];
  const int64_t h = blockIdx.x, r = blockIdx.y;
  const PieceV4 pc = pieces[row_piece[r]];
  const int64_t p = pos[r], nn = d - rd, rowb = kv_model1_row_bytes(d, rd);
  const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) qs[i] = q[(r * H + h) * d + i];
  const int64_t first = p - W + 1 > 0 ? p - W + 1 : 0, n = W + n_sel;
  constexpr int kAcc = 1;  // channels per thread: d <= kAcc * blockDim.x
  float acc[kAcc] = {};
  float m = -1e30f, sum = 0.0f;
  __syncthreads();
  for (int64_t b0 = 0; b0 < n; b0 += kSparseChunk) {
    const int len = static_cast<int>(n - b0 < kSparseChunk ? n - b0 : kSparseChunk);
    for (int e = threadIdx.x; e < len; e += blockDim.x) {
      const int64_t idx = b0 + e;
      const uint8_t* kp = nullptr;
      const float* fp = nullptr;
      if (idx < W) {
        const int64_t qp = first + idx;
        if (qp <= p) {
          if (qp >= pc.start) fp = kvn + (pc.row0 + qp - pc.start) * d;
          else kp = pc.window + (qp % cap) * rowb;
        }
      } else {
        const int32_t t = sel[r * n_sel + (idx - W)];
        if (t >= 0) kp = pc.comp.row(t, rowb);
      }
      kptr[e] = kp;
      fptr[e] = fp;
    }
    // The block's packed rows into shared memory (8-byte loads when every row allows), then
    // decoded once into keys.
    bool aligned = true;
    for (int e = threadIdx.x; e < len; e += blockDim.x)
      aligned = aligned && (reinterpret_cast<uintptr_t>(kptr[e]) & 7) == 0;
    if (__syncthreads_and(aligned && rowb % 8 == 0)) stage_rows<uint2>(kptr, len, static_cast<int>(rowb), raw, rowp);
    else stage_rows<uint8_t>(kptr, len, static_cast<int>(rowb), raw, rowp);
    __syncthreads();
    for (int e = wp; e < len; e += nw) {
      float* dst = keys + e * ks;
      if (fptr[e]) {
        const float* src = fptr[e];
#pragma unroll 4
        for (int64_t k = lane; k < d; k += 32) dst[k] = src[k];
      } else if (kptr[e]) {
        const uint8_t* src = raw + e * rowp;
#pragma unroll 4
        for (int64_t k = lane; k < d; k += 32) dst[k] = v4_row_at(src, nn, k);
      }
    }
    __syncthreads();
    const int grp = threadIdx.x >> 3, j = threadIdx.x & 7, ngrp = blockDim.x >> 3;
    for (int e0 = 0; e0 < len; e0 += ngrp) {
      const int e = e0 + grp;
      const bool valid = e < len && (kptr[e] || fptr[e]);
      float l = 0.0f;
      if (valid) {
        const float* kr = keys + e * ks;
        for (int64_t k = j; k < d; k += 8) l = __fadd_rn(l, __fmul_rn(qs[k], kr[k]));
      }
      l = combine8(l);
      if (j == 0 && e < len) s_blk[e] = valid ? __fmul_rn(l, scale) : neg_inf();
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      const float s0 = lane < len ? s_blk[lane] : neg_inf();
      const float s1 = lane + 32 < len ? s_blk[lane + 32] : neg_inf();
      const float mb = warp_max(fmaxf(m, fmaxf(s0, s1)));
      const float p0 = exp_f(__fsub_rn(s0, mb)), p1 = exp_f(__fsub_rn(s1, mb));
      float psum = 0.0f;
      for (int t = 0; t < 32; ++t) {
        const float v = __shfl_sync(0xffffffffu, p0, t);
        if (t < len) psum = __fadd_rn(psum, v);
      }
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
#pragma unroll
    for (int u = 0; u < kAcc; ++u) {
      const int64_t c = threadIdx.x + u * static_cast<int64_t>(blockDim.x);
      if (c >= d) break;
      float a = __fmul_rn(acc[u], alpha);
      for (int e = 0; e < len; ++e) {
        if (!kptr[e] && !fptr[e]) continue;
        a = __fadd_rn(a, __fmul_rn(p_blk[e], keys[e * ks + c]));
      }
      acc[u] = a;
    }
    __syncthreads();
  }
  sum = __fadd_rn(sum, exp_f(__fsub_rn(sink[h], m)));
  for (int u = 0; u < kAcc; ++u) {
    const int64_t c = threadIdx.x + u * static_cast<int64_t>(blockDim.x);
    if (c < d) qs[c] = rb(__fdiv_rn(acc[u], sum));
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

cudaError_t v4_head_rms(float* q, int64_t n_heads_total, int64_t hd, float eps, cudaStream_t s) {
  if (n_heads_total == 0) return cudaSuccess;
  if (hd > 8192) return cudaErrorInvalidValue;
  head_rms_kernel<<<static_cast<unsigned>(n_heads_total), 128, hd * sizeof(float), s>>>(q, hd, eps);
  return cudaGetLastError();
}

cudaError_t v4_pack_rows(float* x, int64_t rows, int64_t d, int64_t rd, uint8_t* packed, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if ((d - rd) % 64 || rd < 0 || d > 4096) return cudaErrorInvalidValue;
  pack_rows_kernel<<<static_cast<unsigned>(rows), 128, d * sizeof(float), s>>>(x, d, rd, packed);
  return cudaGetLastError();
}

cudaError_t v4_compress(const EmitDev* emit, int64_t n_emit, const PieceV4* pieces, const float* kp, const float* gp,
                        int64_t w, bool overlap, int ratio, int64_t pcap, const float* ape, const float* norm, float eps,
                        const float* freqs, int n_freq, bool index_side, int64_t rd, cudaStream_t s) {
  if (n_emit == 0) return cudaSuccess;
  const int64_t n = overlap ? w / 2 : w;
  if (n > 4096 || n % 64 || ratio < 1 || (index_side && (n & (n - 1)))) return cudaErrorInvalidValue;
  compress_kernel<<<static_cast<unsigned>(n_emit), kThreads, n * sizeof(float), s>>>(
      emit, pieces, kp, gp, w, overlap, ratio, pcap, ape, norm, eps, freqs, n_freq, index_side, rd);
  return cudaGetLastError();
}

cudaError_t v4_proj_ring_write(const PieceV4* pieces, const int32_t* row_piece, int64_t rows, int64_t pcap,
                               const float* kp, const float* gp, int64_t w, bool index_side, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  proj_ring_write_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(pieces, row_piece, pcap, kp, gp, w, index_side);
  return cudaGetLastError();
}

cudaError_t v4_window_write(const PieceV4* pieces, const int32_t* row_piece, int64_t rows, int64_t cap,
                            const uint8_t* packed, int64_t row_bytes, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  window_write_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(pieces, row_piece, cap, packed, row_bytes);
  return cudaGetLastError();
}

cudaError_t v4_hadamard_fp4(float* x, int64_t n_heads_total, int64_t hd, cudaStream_t s) {
  if (n_heads_total == 0) return cudaSuccess;
  if (hd % 32 || (hd & (hd - 1)) || hd > 4096) return cudaErrorInvalidValue;
  const size_t shm = hd * sizeof(float) + hd / 2 + hd / 32 + 16;
  hadamard_fp4_kernel<<<static_cast<unsigned>(n_heads_total), 128, shm, s>>>(x, hd);
  return cudaGetLastError();
}

cudaError_t v4_order_desc(const float* score, int64_t stride, int64_t rows, int64_t k, int32_t* topk, cudaStream_t s) {
  if (rows == 0 || k == 0) return cudaSuccess;
  if (k > 4096) return cudaErrorInvalidValue;
  int P = 1;
  while (P < k) P <<= 1;
  order_desc_kernel<<<static_cast<unsigned>(rows), 512, 2 * static_cast<size_t>(P) * sizeof(float), s>>>(score, stride, k,
                                                                                                        P, topk);
  return cudaGetLastError();
}

cudaError_t v4_topk_desc(const float* score, int64_t stride, const int64_t* pos, int64_t rows, int ratio, int64_t k,
                         int32_t* topk, int32_t* work, cudaStream_t s) {
  if (rows == 0 || k == 0) return cudaSuccess;
  if (k > 4096) return cudaErrorInvalidValue;
  // The set: the production selection kernel (ties to the lower row), rows ascending; then the order.
  const cudaError_t e = topk_rows(score, stride, pos, rows, ratio, nullptr, 0, k, topk, work, s);
  if (e != cudaSuccess) return e;
  return v4_order_desc(score, stride, rows, k, topk, s);
}

cudaError_t v4_all_rows(const int64_t* pos, int64_t rows, int ratio, int64_t width, int32_t* list, cudaStream_t s) {
  if (rows == 0 || width == 0) return cudaSuccess;
  all_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(pos, ratio, width, list);
  return cudaGetLastError();
}

cudaError_t v4_sparse_attention(const float* q, const float* kvn, const PieceV4* pieces, const int32_t* row_piece,
                                const int64_t* pos, int64_t rows, int64_t H, int64_t d, int64_t rd, int64_t W,
                                int64_t cap, const int32_t* sel, int64_t n_sel, const float* sink, float scale,
                                const float* freqs, int n_freq, int64_t G, float* o, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (d > kSparseThreads || d % 8 || H % G || (d - rd) % 64) return cudaErrorInvalidValue;
  // The tensor-core kernel of V4.1 over V4 lists where it has the shape (every preset's); with
  // DSV4_ATTN_TC=0 the kernel below, cpu::sparse_attend_head's arithmetic.
  if (sparse_attention_impl() == SparseAttentionImpl::tensor_core && (d == 128 || d == 512) && rd == 64 && W + n_sel > 0) {
    sparse::SparseArgs a{q, kvn, nullptr, row_piece, pos, sel, sink, freqs, o, rows, H, d, W, cap, n_sel, G, scale,
                         n_freq, CompFormat::fp8_ue8m0_32};
    a.pieces_v4 = pieces;
    a.rd = rd;
    return sparse::tensor_core_v4(a, s);
  }
  const dim3 grid(static_cast<unsigned>(H), static_cast<unsigned>(rows));
  const size_t shm = (kSparseChunk * sparse_key_stride(d) + d) * sizeof(float) +
                    kSparseChunk * sparse_raw_stride(kv_model1_row_bytes(d, rd));  // d = 512: 169 KiB
  // Always raised: with the static arrays a total over 48 KiB needs it even when shm alone is not.
  const cudaError_t e = cudaFuncSetAttribute(sparse_v4_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shm));
  if (e != cudaSuccess) return e;
  sparse_v4_kernel<<<grid, kSparseThreads, shm, s>>>(q, kvn, pieces, row_piece, pos, rows, H, d, rd, W, cap, sel, n_sel,
                                                      sink, scale, freqs, n_freq, G, o);
  return cudaGetLastError();
}

}  // namespace dsv4::cuda
