// Sparse attention with sinks over [window part ; selected compressed rows] (model-spec.md §3.6,
// K41 sparse_attn), the two-pass form (used for few rows with selected entries), the reference
// kernel's arithmetic unchanged: (1) every entry's score for every head, blocks of (64 entries x
// 4 heads) sharing the staged keys; (2) per (channel slice, 4 heads): the online softmax's running
// maxima, bf16 P and fp32 denominator, then each channel's accumulator over the entries in order. Only the work is parallel; every
// floating-point operation and its order are those of cpu::sparse_attend_head, so the output is a
// function of the row alone (any row count, any row chunking).
#include "backends/cuda/kernels/attention/attn_sparse_rows.cuh"

namespace dsv4::cuda {

namespace {

using namespace attn;
using namespace sparse;
constexpr int kScoreHeads = 4;   // heads per score block: 64 entries x 4 heads = 256 threads
constexpr int kAccHeads = 4;     // heads per accumulation block, one warp each
// Channels per accumulation block (two per lane). 32 rather than 64: twice the blocks, each staging
// half the keys in 80 KB (two per SM), where staging is the kernel's longest stage (H200, attention_bench
// --kernels at 4K: window + 512 selected 46.7 -> 41.4 us; docs/perf.md).
constexpr int kSlice = 32;
constexpr int64_t kRowChunk = 64;  // rows per kernel pair (bounds the score buffer)
constexpr int64_t kMaxSmem = 227 * 1024;  // opt-in shared memory per block (sm_90 / sm_100)

constexpr int kBatch = 8;  // loads a thread keeps in flight while staging

__device__ __forceinline__ float lo_bf16(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_bf16(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// Scores of 64 entries for kScoreHeads heads: score[(r - r0), h, idx] = (q_h . k_idx) * scale with
// the oracle's dot (8 interleaved partial sums, combined pairwise), -inf for invalid entries.
// Grid (entry block, head group, row - r0); one thread per (head, entry).
template <int D>
__global__ void __launch_bounds__(64 * kScoreHeads) sparse_scores_kernel(SparseArgs a, int64_t r0, float* score) {
  constexpr int ks = D + 8;  // key row stride in bf16 elements (16 B pad: conflict-free 16 B loads)
  extern __shared__ __align__(16) float smem[];
  float* qs = smem;                                                // [kScoreHeads, D]
  uint16_t* keys = reinterpret_cast<uint16_t*>(qs + kScoreHeads * D);  // [64, ks] bf16 bits
  __shared__ int kind[64];
  __shared__ const void* kptr[64];
  const int64_t r = r0 + blockIdx.z, h0 = static_cast<int64_t>(blockIdx.y) * kScoreHeads;
  const int64_t b0 = static_cast<int64_t>(blockIdx.x) * 64, n = a.W + a.n_sel;
  const PieceDev& pc = a.pieces[a.row_piece[r]];
  const int64_t p = a.pos[r];
  {
    constexpr int n4 = kScoreHeads * D / 4, nq = (n4 + 64 * kScoreHeads - 1) / (64 * kScoreHeads);  // float4 per thread
    const float4* src = reinterpret_cast<const float4*>(a.q + (r * a.H + h0) * D);
    float4 t[nq];
#pragma unroll
    for (int u = 0; u < nq; ++u) {
      const int i = threadIdx.x + u * 64 * kScoreHeads;
      t[u] = i < n4 ? __ldg(src + i) : float4{};
    }
#pragma unroll
    for (int u = 0; u < nq; ++u) {
      const int i = threadIdx.x + u * 64 * kScoreHeads;
      if (i < n4) reinterpret_cast<float4*>(qs)[i] = t[u];
    }
  }
  if (threadIdx.x < 64) {
    const void* ptr = nullptr;
    const int64_t idx = b0 + threadIdx.x;
    const int32_t sel = idx >= a.W && idx < n ? __ldg(a.topk + r * a.n_sel + (idx - a.W)) : -1;
    kind[threadIdx.x] = idx < n ? list_entry(a, pc, p, idx, sel, ptr) : kInvalid;
    kptr[threadIdx.x] = ptr;
  }
  __syncthreads();
  stage_keys8<kBatch>(
      static_cast<int>(threadIdx.x), 64 * kScoreHeads, 64 * (D / 8), D,
      [&](int i, const void*& ptr, int64_t& k) {
        const int e = i / (D / 8);
        ptr = kptr[e];
        k = (i % (D / 8)) * 8;
        return kind[e];
      },
      [&](int i, int kd, const float* v) {  // invalid entries' keys are never read
        const int e = i / (D / 8), k = (i % (D / 8)) * 8;
        if (kd != kInvalid) *reinterpret_cast<uint4*>(keys + e * ks + k) = pack_bf16x8(v);
      });
  __syncthreads();
  const int hl = threadIdx.x / 64, e = threadIdx.x % 64;
  const int64_t idx = b0 + e;
  if (idx >= n) return;
  float s = __int_as_float(0xff800000);
  if (kind[e] != kInvalid) {
    const uint16_t* kr = keys + e * ks;
    const float* qh = qs + hl * D;
    float l[8] = {};
#pragma unroll 4
    for (int i = 0; i < D; i += 8) {
      const uint4 kk = *reinterpret_cast<const uint4*>(kr + i);
      const float4 qa = *reinterpret_cast<const float4*>(qh + i), qb = *reinterpret_cast<const float4*>(qh + i + 4);
      l[0] = __fadd_rn(l[0], __fmul_rn(qa.x, lo_bf16(kk.x)));
      l[1] = __fadd_rn(l[1], __fmul_rn(qa.y, hi_bf16(kk.x)));
      l[2] = __fadd_rn(l[2], __fmul_rn(qa.z, lo_bf16(kk.y)));
      l[3] = __fadd_rn(l[3], __fmul_rn(qa.w, hi_bf16(kk.y)));
      l[4] = __fadd_rn(l[4], __fmul_rn(qb.x, lo_bf16(kk.z)));
      l[5] = __fadd_rn(l[5], __fmul_rn(qb.y, hi_bf16(kk.z)));
      l[6] = __fadd_rn(l[6], __fmul_rn(qb.z, lo_bf16(kk.w)));
      l[7] = __fadd_rn(l[7], __fmul_rn(qb.w, hi_bf16(kk.w)));
    }
    const float dot = __fadd_rn(__fadd_rn(__fadd_rn(l[0], l[1]), __fadd_rn(l[2], l[3])),
                                __fadd_rn(__fadd_rn(l[4], l[5]), __fadd_rn(l[6], l[7])));
    s = __fmul_rn(dot, a.scale);
  }
  score[((r - r0) * a.H + h0 + hl) * n + idx] = s;
}

// Shared memory of the accumulation kernel for n entries and a slice of cs channels: entry
// pointers [n], P [kAccHeads, n], per-block statistics, the compacted entry list [n] and block
// offsets [nb + 1], then the keys [n, cs] fp32 (16 B aligned) and the entry kinds [n].
struct AccumLayout {
  int64_t ptr, P, mrun, alpha, psum, sums, vidx, boff, keys, kind, total;
  __host__ __device__ AccumLayout(int64_t n, int64_t cs) {
    const int64_t nb = (n + 63) / 64;
    ptr = 0;
    P = (ptr + 8 * n + 15) / 16 * 16;  // [kAccHeads, nb * 64]: whole 64-blocks (scores -inf, P 0 past n)
    mrun = P + 4 * kAccHeads * nb * 64;
    alpha = mrun + 4 * kAccHeads * nb;
    psum = alpha + 4 * kAccHeads * nb;
    sums = psum + 4 * kAccHeads * nb;
    vidx = sums + 4 * kAccHeads;
    boff = vidx + 4 * n;
    keys = (boff + 4 * (nb + 1) + 15) / 16 * 16;
    kind = keys + 4 * n * cs;
    total = kind + n;
  }
};

// Grid (channel slice, head group, row - r0); 2 * kAccHeads warps: warp w < kAccHeads is head h0 + w,
// lane l owning channels c0 + 2l, c0 + 2l + 1 of the slice (cs channels, cs/2 <= 32 lanes); the
// other warps stage the keys meanwhile.
// Per head, in the oracle's terms: block maxima -> running max m_b (from -1e30) -> alpha_b =
// exp(m_{b-1} - m_b); P = exp(s - m_b) (fp32), psum_b = P summed in entry order, sum = sum*alpha + psum
// block by block, + exp(sink - m); then per channel acc = acc*alpha_b, + bf16(P)*k over the valid
// entries in order; o = bf16(acc / sum), the tail rotated back at p. The valid entries are compacted
// (order kept) so the accumulation loop reads only them.
// Barrier of the staging warps only (named barrier 1; the head warps do not take part).
__device__ __forceinline__ void loaders_sync() { asm volatile("bar.sync 1, %0;" ::"n"(32 * kAccHeads) : "memory"); }

__global__ void __launch_bounds__(64 * kAccHeads)
sparse_accum_kernel(SparseArgs a, int64_t r0, const float* score, int cs) {
  extern __shared__ __align__(16) unsigned char sm[];
  const int64_t n = a.W + a.n_sel, nb = (n + 63) / 64;
  const AccumLayout L(n, cs);
  const void** kptr = reinterpret_cast<const void**>(sm + L.ptr);
  float* P = reinterpret_cast<float*>(sm + L.P);
  float* mrun = reinterpret_cast<float*>(sm + L.mrun);
  float* alpha = reinterpret_cast<float*>(sm + L.alpha);
  float* psum = reinterpret_cast<float*>(sm + L.psum);
  int* vidx = reinterpret_cast<int*>(sm + L.vidx);
  int* boff = reinterpret_cast<int*>(sm + L.boff);
  float* keys = reinterpret_cast<float*>(sm + L.keys);
  uint8_t* kind = sm + L.kind;
  const int64_t r = r0 + blockIdx.z, c0 = static_cast<int64_t>(blockIdx.x) * cs;
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t p = a.pos[r];
  constexpr int kLoaders = 32 * kAccHeads;  // threads of the staging warps
  if (w >= kAccHeads) {
    // Staging warps: the key list, its compaction (valid entries keep their order) and the
    // slice of every valid key, fp32, at its slot; meanwhile the head warps do the statistics.
    const int lt = threadIdx.x - kLoaders, lw = w - kAccHeads;
    const PieceDev& pc = a.pieces[a.row_piece[r]];
    for (int64_t e0 = lt; e0 < n; e0 += kBatch * kLoaders) {
      int32_t sel[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int64_t e = e0 + u * kLoaders;
        sel[u] = e >= a.W && e < n ? __ldg(a.topk + r * a.n_sel + (e - a.W)) : -1;
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int64_t e = e0 + u * kLoaders;
        if (e >= n) continue;
        const void* ptr = nullptr;
        kind[e] = static_cast<uint8_t>(list_entry(a, pc, p, e, sel[u], ptr));
        kptr[e] = ptr;
      }
    }
    loaders_sync();
    for (int64_t b = lw; b < nb; b += kAccHeads) {  // block b's count in boff[b + 1]
      const int64_t e0 = b * 64 + lane, e1 = e0 + 32;
      const unsigned b0 = __ballot_sync(0xffffffffu, e0 < n && kind[e0] != kInvalid);
      const unsigned b1 = __ballot_sync(0xffffffffu, e1 < n && kind[e1] != kInvalid);
      if (lane == 0) boff[b + 1] = __popc(b0) + __popc(b1);
    }
    loaders_sync();
    if (lt == 0) {
      boff[0] = 0;
      for (int64_t b = 1; b <= nb; ++b) boff[b] += boff[b - 1];
    }
    loaders_sync();
    for (int64_t b = lw; b < nb; b += kAccHeads) {
      int base = boff[b];
      for (int half = 0; half < 2; ++half) {
        const int64_t e = b * 64 + 32 * half + lane;
        const bool v = e < n && kind[e] != kInvalid;
        const unsigned bal = __ballot_sync(0xffffffffu, v);
        if (v) vidx[base + __popc(bal & ((1u << lane) - 1u))] = static_cast<int>(e);
        base += __popc(bal);
      }
    }
    loaders_sync();
    const int nv = boff[nb], per = cs / 8;
    stage_keys8<kBatch>(
        lt, kLoaders, nv * per, a.d,
        [&](int i, const void*& ptr, int64_t& k) {
          const int e = vidx[i / per];
          ptr = kptr[e];
          k = c0 + 8 * (i % per);
          return static_cast<int>(kind[e]);
        },
        [&](int i, int, const float* v) {
          const int ci = i / per, j = i % per;
          float4* dst = reinterpret_cast<float4*>(keys + static_cast<int64_t>(ci) * cs + 8 * j);
          dst[0] = make_float4(v[0], v[1], v[2], v[3]);
          dst[1] = make_float4(v[4], v[5], v[6], v[7]);
        });
    __syncthreads();
    return;
  }
  // Softmax statistics of head h (warp w), independent of the keys. Padding entries past n
  // (score -inf, P 0) take part in no max and add +0 to the block's P sum: no change.
  const int64_t h = static_cast<int64_t>(blockIdx.y) * kAccHeads + w;
  const int64_t np = nb * 64;
  float* Pw = P + w * np;
  float* mw = mrun + w * nb;
  float* aw = alpha + w * nb;
  float* pw = psum + w * nb;
  const float* sw = score + ((r - r0) * a.H + h) * n;
  for (int64_t e0 = lane; e0 < np; e0 += 32 * kBatch) {
    float t[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) t[u] = e0 + 32 * u < n ? __ldg(sw + e0 + 32 * u) : __int_as_float(0xff800000);
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
      if (e0 + 32 * u < np) Pw[e0 + 32 * u] = t[u];
  }
  __syncwarp();
  for (int64_t b = 0; b < nb; ++b) {  // block maxima by the warp (max is exact in any order)
    const float mx = warp_max(fmaxf(Pw[b * 64 + lane], Pw[b * 64 + 32 + lane]));
    if (lane == 0) pw[b] = mx;
  }
  __syncwarp();
  if (lane == 0) {
    float m = -1e30f;
    for (int64_t b = 0; b < nb; ++b) {
      m = fmaxf(m, pw[b]);
      mw[b] = m;
    }
  }
  __syncwarp();
  for (int64_t b = lane; b < nb; b += 32) aw[b] = exp_f(__fsub_rn(b > 0 ? mw[b - 1] : -1e30f, mw[b]));
#pragma unroll 4
  for (int64_t e = lane; e < np; e += 32) Pw[e] = exp_f(__fsub_rn(Pw[e], mw[e >> 6]));
  __syncwarp();
  for (int64_t b = lane; b < nb; b += 32) {  // P summed in entry order, the block read up front
    float4 v[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = reinterpret_cast<const float4*>(Pw + b * 64)[i];
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) s = __fadd_rn(__fadd_rn(__fadd_rn(__fadd_rn(s, v[i].x), v[i].y), v[i].z), v[i].w);
    pw[b] = s;
  }
  __syncwarp();
  float sum = 0.0f;
  for (int64_t b = 0; b < nb; ++b) sum = __fadd_rn(__fmul_rn(sum, aw[b]), pw[b]);
  sum = __fadd_rn(sum, exp_f(__fsub_rn(a.sink[h], mw[nb - 1])));
  __syncthreads();  // the staging warps are done: kinds, slots, keys
  const int nv = boff[nb];
  // P of the valid entries, bf16, moved to their slots (slot <= entry: reads stay ahead of writes).
  for (int base = 0; base < nv; base += 32) {
    const int ci = base + lane;
    const float v = ci < nv ? rb(Pw[vidx[ci]]) : 0.0f;
    __syncwarp();
    if (ci < nv) Pw[ci] = v;
    __syncwarp();
  }
  if (2 * lane >= cs) return;
  float a0 = 0.0f, a1 = 0.0f;
  const float* kl = keys + 2 * lane;
  for (int64_t b = 0; b < nb; ++b) {
    const float al = aw[b];
    a0 = __fmul_rn(a0, al);
    a1 = __fmul_rn(a1, al);
    const int end = boff[b + 1];
#pragma unroll 8
    for (int ci = boff[b]; ci < end; ++ci) {
      const float2 k2 = *reinterpret_cast<const float2*>(kl + static_cast<int64_t>(ci) * cs);
      const float pe = Pw[ci];
      a0 = __fadd_rn(a0, __fmul_rn(pe, k2.x));
      a1 = __fadd_rn(a1, __fmul_rn(pe, k2.y));
    }
  }
  float o0 = rb(a0 / sum), o1 = rb(a1 / sum);
  const int64_t c = c0 + 2 * lane, tail = a.d - 2 * a.n_freq;
  if (c >= tail) {
    float cs_, sn;
    rope_cs(p, a.freqs[(c - tail) / 2], cs_, sn);
    rope_pair(o0, o1, cs_, -sn);
  }
  const int64_t hpg = a.H / a.G, g = h / hpg, hh = h % hpg;
  float* out = a.o + (g * a.rows + r) * hpg * a.d + hh * a.d + c;
  out[0] = o0;
  out[1] = o1;
}

template <typename K, typename... Args>
cudaError_t launch(K kernel, dim3 grid, int threads, size_t shm, cudaStream_t s, Args... args) {
  if (shm > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shm));
    if (e != cudaSuccess) return e;
  }
  kernel<<<grid, threads, shm, s>>>(args...);
  return cudaGetLastError();
}

}  // namespace

int64_t sparse::two_pass_work_floats(int64_t rows, int64_t H, int64_t W, int64_t n_sel) {
  return (rows < kRowChunk ? rows : kRowChunk) * H * (W + n_sel);
}

cudaError_t sparse::two_pass(const SparseArgs& a, float* work, cudaStream_t s) {
  const int64_t rows = a.rows, H = a.H, d = a.d, W = a.W, n_sel = a.n_sel;
  if (d % 32 || H % kScoreHeads || H % kAccHeads || !work || W + n_sel == 0) return cudaErrorInvalidValue;
  const int64_t n = W + n_sel, nb = (n + 63) / 64;
  const size_t shm1 = (kScoreHeads * d) * sizeof(float) + 64 * (d + 8) * sizeof(uint16_t);
  const int cs = kSlice;  // d is a multiple of it (checked above)
  const size_t shm2 = static_cast<size_t>(AccumLayout(n, cs).total);
  if (shm2 > kMaxSmem) return cudaErrorInvalidValue;
  for (int64_t r0 = 0; r0 < rows; r0 += kRowChunk) {
    const unsigned rc = static_cast<unsigned>(rows - r0 < kRowChunk ? rows - r0 : kRowChunk);
    const dim3 g1(static_cast<unsigned>(nb), static_cast<unsigned>(H / kScoreHeads), rc);
    cudaError_t e;
    switch (d) {
      case 64: e = launch(sparse_scores_kernel<64>, g1, 64 * kScoreHeads, shm1, s, a, r0, work); break;
      case 128: e = launch(sparse_scores_kernel<128>, g1, 64 * kScoreHeads, shm1, s, a, r0, work); break;
      case 256: e = launch(sparse_scores_kernel<256>, g1, 64 * kScoreHeads, shm1, s, a, r0, work); break;
      case 512: e = launch(sparse_scores_kernel<512>, g1, 64 * kScoreHeads, shm1, s, a, r0, work); break;
      default: return cudaErrorInvalidValue;
    }
    if (e != cudaSuccess) return e;
    const dim3 g2(static_cast<unsigned>(d / cs), static_cast<unsigned>(H / kAccHeads), rc);
    e = launch(sparse_accum_kernel, g2, 64 * kAccHeads, shm2, s, a, r0, static_cast<const float*>(work), cs);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace dsv4::cuda
