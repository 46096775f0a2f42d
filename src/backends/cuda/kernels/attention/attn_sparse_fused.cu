// Sparse attention with sinks over [window part ; selected compressed rows] (model-spec.md §3.6,
// K41 sparse_attn) in one launch, the reference kernel's arithmetic unchanged. A cluster of 8 CTAs
// serves one (row, 4 heads): CTA c computes the scores of entries 8c..8c+7 of every 64-entry block
// (each lane one of the oracle's 8 interleaved dot partials) and sends them to every CTA of the
// cluster through distributed shared memory; every CTA then derives the block's running maxima and
// P, and accumulates its own eighth of the channels over the entries in list order. Every
// floating-point operation and its order are those of cpu::sparse_attend_head, so the output is a
// function of the row alone (any row count, any row chunking), equal to the two-pass kernels of
// attn_sparse.cu bit for bit. sparse_attention (attn_sparse_entry.cu) picks the kernel.
#include <cooperative_groups.h>

#include "backends/cuda/kernels/attention/attn_sparse_rows.cuh"

namespace dsv4::cuda {

namespace {

using namespace attn;
using namespace sparse;
namespace cg = cooperative_groups;
constexpr int kHeads = 4;                    // heads per cluster
constexpr int kRanks = 8;                    // CTAs per cluster (the dot's 8 partials, the channel eighths)
constexpr int kWork = 256;                   // scoring / statistics threads (warps 0-7)
constexpr int kThreads = kWork + 32;         // + warp 8: the softmax denominators
constexpr int64_t kMaxRowsPerLaunch = 65535; // grid.z
constexpr int64_t kMaxSmem = 227 * 1024;     // opt-in shared memory per block (sm_90 / sm_100)

// Shared memory of the fused kernel for head dim D, S blocks per step and n list entries (byte
// offsets). Per-partial rows of jr = D/8 + 4 floats: element k of a q or key row sits at
// [k % 8][k / 8], so that lane j reads its partial's elements as float4 runs, the 16-byte pad
// keeping the 8 lanes of an entry on distinct banks.
struct FusedLayout {
  int64_t q, keyF, keyS, sc, pb, pf, alpha, red, mfin, sumf, kptr, vb, kind, total;
  __host__ __device__ FusedLayout(int64_t D, int S, int64_t n) {
    const int64_t jr = D / 8 + 4, cs = D / 8, nb = (n + 63) / 64;
    q = 0;                                     // [kHeads][8][jr] f32: the cluster's queries
    keyF = q + 4 * kHeads * 8 * jr;            // [S][8 entries][8][jr] f32: this rank's entries, whole
    keyS = keyF + 4 * int64_t{S} * 64 * jr;    // [S][64 entries][cs] f32: every entry, this rank's channels
    sc = keyS + 4 * int64_t{S} * 64 * cs;      // [2][kHeads][S * 64] scores (written by every rank)
    pb = sc + 4 * 2 * kHeads * S * 64;         // [kHeads][S * 64] bf16(P)
    pf = pb + 4 * kHeads * S * 64;             // [kHeads][S * 64] P
    alpha = pf + 4 * kHeads * S * 64;          // [kHeads][S] exp(m_prev - m)
    red = alpha + 4 * kHeads * S;              // [kHeads][S][2] block maxima of the two warps of a head
    mfin = red + 4 * kHeads * S * 2;           // [kHeads] running max after the last block
    sumf = mfin + 4 * kHeads;                  // [kHeads] denominators with the sink
    kptr = (sumf + 4 * kHeads + 15) / 16 * 16; // [n] key row addresses
    vb = kptr + 8 * n;                         // [nb] indices of the blocks holding a valid entry
    kind = vb + 4 * nb;                        // [n] entry kinds
    total = kind + n;
  }
};

// Grid (kRanks, H / kHeads, rows), clusters of kRanks along x. Per step of up to S valid 64-entry
// blocks (a block without a valid entry leaves m, sum and acc unchanged: alpha = 1, P = 0):
//   1. stage this rank's 8 entries of each block whole and every entry's channel eighth (fp32);
//   2. scores: thread (head hs, entry el, partial j) runs the oracle's partial j of q_hs . k, the 8
//      partials combined ((0+1)+(2+3))+((4+5)+(6+7)), times scale; sent to every rank;
//   3. per head, block maxima -> running max m (from -1e30) -> alpha = exp(m_prev - m), P = exp(s - m);
//   4. warps 0-3 (head w, channels 2*lane, 2*lane+1 of the eighth): acc = acc*alpha, + bf16(P)*k in
//      entry order; warp 8 meanwhile: sum = sum*alpha + (P summed in entry order).
// Then sum += exp(sink - m), o = bf16(acc / sum), the tail rotated back at p.
template <int S>
__global__ void __cluster_dims__(kRanks, 1, 1) __launch_bounds__(kThreads, S == 1 ? 3 : 1)
sparse_fused_kernel(SparseArgs a, int64_t r0) {
  constexpr int kB = S == 1 ? 4 : 16;  // loads a thread keeps in flight while staging (a whole step)
  extern __shared__ __align__(16) unsigned char sm[];
  cg::cluster_group cl = cg::this_cluster();
  const int D = static_cast<int>(a.d), cs = D / 8, jr = D / 8 + 4, per = D / 8, cper = D / 64;
  const int lg_per = 31 - __clz(per), lg_cper = 31 - __clz(cper);  // D a power of two: shifts, not divisions
  const int64_t n = a.W + a.n_sel, nb = (n + 63) / 64;
  const FusedLayout L(D, S, n);
  float* qs = reinterpret_cast<float*>(sm + L.q);
  float* keyF = reinterpret_cast<float*>(sm + L.keyF);
  float* keyS = reinterpret_cast<float*>(sm + L.keyS);
  float* sc = reinterpret_cast<float*>(sm + L.sc);
  float* pb = reinterpret_cast<float*>(sm + L.pb);
  float* pf = reinterpret_cast<float*>(sm + L.pf);
  float* alpha = reinterpret_cast<float*>(sm + L.alpha);
  float* red = reinterpret_cast<float*>(sm + L.red);
  float* mfin = reinterpret_cast<float*>(sm + L.mfin);
  float* sumf = reinterpret_cast<float*>(sm + L.sumf);
  const void** kptr = reinterpret_cast<const void**>(sm + L.kptr);
  int* vb = reinterpret_cast<int*>(sm + L.vb);
  uint8_t* kind = sm + L.kind;
  __shared__ int nvb_sh;
  const int c = static_cast<int>(cl.block_rank());
  const int t = threadIdx.x, lane = t & 31;
  const int64_t r = r0 + blockIdx.z, h0 = static_cast<int64_t>(blockIdx.y) * kHeads;
  const int64_t p = a.pos[r];
  const PieceDev& pc = a.pieces[a.row_piece[r]];

  // Prologue: the queries in partial-major order, the key list, the valid blocks in order.
  {
    const float4* src = reinterpret_cast<const float4*>(a.q + (r * a.H + h0) * D);
    for (int i = t; i < kHeads * D / 4; i += kThreads) {
      const float4 v = __ldg(src + i);
      const int hl = 4 * i / D, k = 4 * i % D;  // k % 8 is 0 or 4: one m, partials k%8 .. k%8+3
      float* dst = qs + (hl * 8 + (k & 7)) * jr + (k >> 3);
      dst[0] = v.x;
      dst[jr] = v.y;
      dst[2 * jr] = v.z;
      dst[3 * jr] = v.w;
    }
  }
  for (int64_t e = t; e < n; e += kThreads) {
    const int32_t sel = e >= a.W ? __ldg(a.topk + r * a.n_sel + (e - a.W)) : -1;
    const void* ptr = nullptr;
    kind[e] = static_cast<uint8_t>(list_entry(a, pc, p, e, sel, ptr));
    kptr[e] = ptr;
  }
  if (t < kHeads) mfin[t] = -1e30f;
  __syncthreads();
  if (t < 32) {
    int cnt = 0;
    for (int64_t b0 = 0; b0 < nb; b0 += 32) {
      const int64_t b = b0 + t;
      bool v = false;
      if (b < nb) {
        const int64_t e1 = b * 64 + 64 < n ? b * 64 + 64 : n;
        for (int64_t e = b * 64; e < e1; ++e) v = v || kind[e] != kInvalid;
      }
      const unsigned bal = __ballot_sync(0xffffffffu, v);
      if (v) vb[cnt + __popc(bal & ((1u << t) - 1u))] = static_cast<int>(b);
      cnt += __popc(bal);
    }
    if (t == 0) nvb_sh = cnt;
  }
  __syncthreads();
  const int nvb = nvb_sh;

  const int j = t & 7, el = (t >> 3) & 7, hs = (t >> 6) & 3, e64 = t & 63;  // scores / statistics roles
  const int ha = (t >> 5) & 3;                                                 // accumulation role (t < 128)
  float m = -1e30f, a0 = 0.0f, a1 = 0.0f, sum = 0.0f;
  const float neg_inf = __int_as_float(0xff800000);
  for (int sb = 0, it = 0; sb < nvb; sb += S, ++it) {
    const int ns = nvb - sb < S ? nvb - sb : S;
    float* scb = sc + (it & 1) * kHeads * S * 64;
    // 1. Staging.
    const int nF = ns * 8 * per, nS = ns * 64 * cper;
    stage_keys8<kB>(
        t, kThreads, nF + nS, D,
        [&](int i, const void*& ptr, int64_t& k) {
          int64_t e;
          if (i < nF) {
            const int blk = i >> (lg_per + 3), rem = i & (8 * per - 1);
            e = int64_t{vb[sb + blk]} * 64 + 8 * c + (rem >> lg_per);
            k = (rem & (per - 1)) * 8;
          } else {
            const int i2 = i - nF, blk = i2 >> (lg_cper + 6), rem = i2 & (64 * cper - 1);
            e = int64_t{vb[sb + blk]} * 64 + (rem >> lg_cper);
            k = int64_t{c} * cs + (rem & (cper - 1)) * 8;
          }
          const int kd = e < n ? kind[e] : kInvalid;
          if (kd != kInvalid) ptr = kptr[e];
          return kd;
        },
        [&](int i, int, const float* v) {  // invalid entries stage zeros
          if (i < nF) {
            const int blk = i >> (lg_per + 3), rem = i & (8 * per - 1), ee = rem >> lg_per, m8 = rem & (per - 1);
            float* dst = keyF + ((blk * 8 + ee) * 8) * jr + m8;
#pragma unroll
            for (int q = 0; q < 8; ++q) dst[q * jr] = v[q];
          } else {
            const int i2 = i - nF, blk = i2 >> (lg_cper + 6), rem = i2 & (64 * cper - 1);
            float4* dst = reinterpret_cast<float4*>(keyS + (blk * 64 + (rem >> lg_cper)) * cs + (rem & (cper - 1)) * 8);
            dst[0] = make_float4(v[0], v[1], v[2], v[3]);
            dst[1] = make_float4(v[4], v[5], v[6], v[7]);
          }
        });
    __syncthreads();
    // 2. Scores of this rank's entries, sent to every rank.
    if (t < kWork) {
      float l[S];
#pragma unroll
      for (int s = 0; s < S; ++s) l[s] = 0.0f;
      const float* qrow = qs + (hs * 8 + j) * jr;
      const float* krow = keyF + (el * 8 + j) * jr;
      for (int m4 = 0; m4 < per; m4 += 4) {
        const float4 qv = *reinterpret_cast<const float4*>(qrow + m4);
#pragma unroll
        for (int s = 0; s < S; ++s) {  // blocks past ns hold stale keys: their scores are not sent
          const float4 kv = *reinterpret_cast<const float4*>(krow + s * 64 * jr + m4);
          l[s] = __fadd_rn(l[s], __fmul_rn(qv.x, kv.x));
          l[s] = __fadd_rn(l[s], __fmul_rn(qv.y, kv.y));
          l[s] = __fadd_rn(l[s], __fmul_rn(qv.z, kv.z));
          l[s] = __fadd_rn(l[s], __fmul_rn(qv.w, kv.w));
        }
      }
#pragma unroll
      for (int s = 0; s < S; ++s) {
        const float dot = combine8(l[s]);
        if (j == 0 && s < ns) {
          const int64_t e = int64_t{vb[sb + s]} * 64 + 8 * c + el;
          const float sv = e < n && kind[e] != kInvalid ? __fmul_rn(dot, a.scale) : neg_inf;
          float* slot = scb + (hs * S + s) * 64 + 8 * c + el;
#pragma unroll
          for (int rr = 0; rr < kRanks; ++rr) *cl.map_shared_rank(slot, rr) = sv;
        }
      }
    }
    cl.sync();
    // 3. Softmax statistics, per head (threads 64*hs .. 64*hs + 63, one entry each).
    float sv[S];
    if (t < kWork) {
#pragma unroll
      for (int s = 0; s < S; ++s) {
        sv[s] = s < ns ? scb[(hs * S + s) * 64 + e64] : neg_inf;
        const float mx = warp_max(sv[s]);
        if (lane == 0) red[(hs * S + s) * 2 + ((t >> 5) & 1)] = mx;
      }
    }
    __syncthreads();
    if (t < kWork) {
#pragma unroll
      for (int s = 0; s < S; ++s) {
        if (s >= ns) break;
        const float mb = fmaxf(m, fmaxf(red[(hs * S + s) * 2], red[(hs * S + s) * 2 + 1]));
        const float al = exp_f(__fsub_rn(m, mb));
        const float P = exp_f(__fsub_rn(sv[s], mb));
        m = mb;
        pf[(hs * S + s) * 64 + e64] = P;
        pb[(hs * S + s) * 64 + e64] = rb(P);
        if (e64 == 0) alpha[hs * S + s] = al;
      }
      if (e64 == 0) mfin[hs] = m;
    }
    __syncthreads();
    // 4. Accumulation (warps 0-3) and denominators (warp 8), each in entry order.
    if (t < kHeads * 32) {
      if (2 * lane < cs) {
        for (int s = 0; s < ns; ++s) {
          const float al = alpha[ha * S + s];
          a0 = __fmul_rn(a0, al);
          a1 = __fmul_rn(a1, al);
          const float* pr = pb + (ha * S + s) * 64;
          const float* kr = keyS + s * 64 * cs + 2 * lane;
#pragma unroll 4
          for (int e = 0; e < 64; e += 4) {
            const float4 p4 = *reinterpret_cast<const float4*>(pr + e);
            const float2 k0 = *reinterpret_cast<const float2*>(kr + (e + 0) * cs);
            const float2 k1 = *reinterpret_cast<const float2*>(kr + (e + 1) * cs);
            const float2 k2 = *reinterpret_cast<const float2*>(kr + (e + 2) * cs);
            const float2 k3 = *reinterpret_cast<const float2*>(kr + (e + 3) * cs);
            a0 = __fadd_rn(a0, __fmul_rn(p4.x, k0.x));
            a1 = __fadd_rn(a1, __fmul_rn(p4.x, k0.y));
            a0 = __fadd_rn(a0, __fmul_rn(p4.y, k1.x));
            a1 = __fadd_rn(a1, __fmul_rn(p4.y, k1.y));
            a0 = __fadd_rn(a0, __fmul_rn(p4.z, k2.x));
            a1 = __fadd_rn(a1, __fmul_rn(p4.z, k2.y));
            a0 = __fadd_rn(a0, __fmul_rn(p4.w, k3.x));
            a1 = __fadd_rn(a1, __fmul_rn(p4.w, k3.y));
          }
        }
      }
    } else if (t >= kWork && lane < kHeads) {
      for (int s = 0; s < ns; ++s) {
        const float* pr = pf + (lane * S + s) * 64;
        float ps = 0.0f;
#pragma unroll 4
        for (int e = 0; e < 64; e += 4) {
          const float4 p4 = *reinterpret_cast<const float4*>(pr + e);
          ps = __fadd_rn(__fadd_rn(__fadd_rn(__fadd_rn(ps, p4.x), p4.y), p4.z), p4.w);
        }
        sum = __fadd_rn(__fmul_rn(sum, alpha[lane * S + s]), ps);
      }
    }
    __syncthreads();
  }
  if (t >= kWork && lane < kHeads) sumf[lane] = __fadd_rn(sum, exp_f(__fsub_rn(a.sink[h0 + lane], mfin[lane])));
  __syncthreads();
  if (t >= kHeads * 32 || 2 * lane >= cs) return;
  const float den = sumf[ha];
  float o0 = rb(a0 / den), o1 = rb(a1 / den);
  const int64_t ch = int64_t{c} * cs + 2 * lane, tail = D - 2 * a.n_freq;
  if (ch >= tail) {
    float cs_, sn;
    rope_cs(p, a.freqs[(ch - tail) / 2], cs_, sn);
    rope_pair(o0, o1, cs_, -sn);
  }
  const int64_t h = h0 + ha, hpg = a.H / a.G, g = h / hpg, hh = h % hpg;
  float* out = a.o + (g * a.rows + r) * hpg * D + hh * D + ch;
  out[0] = o0;
  out[1] = o1;
}

}  // namespace

// One step per 64-entry block (S = 1): a quarter of the shared memory of S = 4, so several
// clusters share an SM; measured faster than S = 4 at one row and at 2048 rows (docs/perf.md).
cudaError_t sparse::fused(const SparseArgs& a, cudaStream_t s) {
  const size_t shm = static_cast<size_t>(FusedLayout(a.d, 1, a.W + a.n_sel).total);
  if (shm > kMaxSmem) return cudaErrorInvalidValue;
  if (shm > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(sparse_fused_kernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(shm));
    if (e != cudaSuccess) return e;
  }
  for (int64_t r0 = 0; r0 < a.rows; r0 += kMaxRowsPerLaunch) {
    const unsigned rc = static_cast<unsigned>(a.rows - r0 < kMaxRowsPerLaunch ? a.rows - r0 : kMaxRowsPerLaunch);
    sparse_fused_kernel<1><<<dim3(kRanks, static_cast<unsigned>(a.H / kHeads), rc), kThreads, shm, s>>>(a, r0);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace dsv4::cuda
