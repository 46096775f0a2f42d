// Sparse attention with sinks over [window part ; selected compressed rows] (model-spec.md §3.6,
// K41 sparse_attn) on tensor cores. One CTA serves one row, 16 * MT of its heads (the MMA's M
// side, padded with zero queries past H) and 1 / CS of the output channels; it walks the row's
// 64-entry blocks that hold a valid entry, in list order, and per block:
//   S = Q K^T by mma.m16n8k16 (bf16 q and keys, fp32 accumulation, k steps in ascending order),
//     times scale, invalid entries -inf;
//   per head the block max, m_new = max(m, block max) (m from -1e30), alpha = exp(m - m_new),
//     P = exp(s - m_new) (fp32), sum = sum * alpha + (P summed over the block, unrounded);
//   acc = acc * alpha + bf16(P) V by mma.m16n8k16 (fp32 accumulation; V = the same key rows);
// then sum += exp(sink - m), o = bf16(acc / sum), the tail rotated back at the row's position.
// Skipped blocks (no valid entry) would change nothing: alpha = 1, P = 0. exp is exp_f, the
// oracle's expf. The keys of the next block are staged into the other of two bf16 buffers while
// the current block computes, through registers (list_entry / raw8 / decode8: the bits the
// CUDA-core kernels stage), in phases that each overlap a part of the block's MMAs. With few rows
// (one CTA's staging is a chain of load latencies then, with little work to hide them behind) the
// stored FP8 / FP4 key rows of the block after next are instead copied raw into shared memory by
// cp.async while the current block computes, and decoded from there (raw8_copied: the same bytes,
// the same values) once it is done, into a single key buffer; fresh rows still load through registers.
// V4 / 0731 lists (tensor_core_v4) run the same kernel: ring and compressed rows in the V4 row
// layout (list_entry_v4 / raw8_v4; copied 8 bytes at a time), the rest unchanged.
// Batch invariance: the output of a (row, head) is a function of the row's q, list and keys alone;
// every head sits at the same MMA row (h % 16), every entry and channel at the same MMA column,
// and the per-head softmax runs in the same lanes whatever the CTA's share of heads (MT m-tiles)
// and of channels (1 / CS) is, so every grid gives the same bits and the row count only picks it.
#include <type_traits>

#include "backends/cuda/kernels/attention/attn_mma.cuh"
#include "backends/cuda/kernels/attention/attn_sparse_rows.cuh"

namespace dsv4::cuda {

namespace {

using namespace attn;
using namespace sparse;

constexpr int kBlock = 64;                // entries per online-softmax block
constexpr int kSRow = kBlock + 4;         // floats per score row (272 B: an odd number of 16-byte units)
constexpr int kPRow = kBlock + 8;         // bf16 per P row (144 B: an odd number of 16-byte units)
constexpr int64_t kMaxSmem = 227 * 1024;  // opt-in shared memory per block (sm_90 / sm_100)

// Shared memory (byte offsets) for head dim D, MT m-tiles, n list entries in nb blocks and, with
// AS, the raw copies of two blocks' stored key rows (an FP8 row's D + D / 32 bytes each, which holds
// an FP4 row too; V4: a V4 row, 8-byte rounded) and the row's selected entries, and one key buffer
// instead of two. bf16 rows of q and keys are 2D + 16 bytes (an odd number of 16-byte units:
// conflict-free ldmatrix).
constexpr int kV4Rope = 64;  // rd of every V4 preset (tensor_core_v4 refuses others)
template <int D, int MT, bool AS, bool V4>
struct TcLayout {
  static constexpr int kRowB = 2 * D + 16;
  // V4 rows: kv_model1_row_bytes(D, kV4Rope), 8-byte rounded.
  static constexpr int kRawB = V4 ? ((D - kV4Rope) + (D - kV4Rope) / 64 + 2 * kV4Rope + 1 + 7) / 8 * 8 : D + D / 32;
  static constexpr int kKeyBufs = AS ? 1 : 2;
  static constexpr int kHeads = 16 * MT;
  int64_t q, keys, s, pb, alpha, den, rope, ptr, kind, valid, vb, sel, raw, total;
  __host__ __device__ TcLayout(int64_t n, int64_t nb) {
    q = 0;                                     // [kHeads] query rows, bf16
    keys = q + int64_t{kHeads} * kRowB;        // [kKeyBufs][64] key rows, bf16
    s = keys + kKeyBufs * int64_t{kBlock} * kRowB;  // [kHeads][kSRow] scores
    pb = s + 4 * int64_t{kHeads} * kSRow;      // [kHeads][kPRow] bf16(P)
    alpha = pb + 2 * int64_t{kHeads} * kPRow;  // [kHeads] exp(m_prev - m) of the current block
    den = alpha + 4 * kHeads;                  // [kHeads] final denominators
    rope = den + 4 * kHeads;                   // [D / 2][2] cos, sin of the tail pairs at the row's position
    ptr = rope + 4 * D;                        // [2][64] key row addresses of the next blocks
    kind = ptr + 8 * 2 * kBlock;               // [2][64] entry kinds
    valid = kind + 2 * kBlock;                 // [2][64] validity of the staged blocks' entries
    vb = valid + 2 * kBlock;                   // [nb] blocks holding a valid entry, in order
    sel = vb + 4 * nb;                         // AS: [n] topk of the list's entries (-1 in the window part)
    raw = (sel + (AS ? 4 * n : 0) + 15) / 16 * 16;  // AS: [2][64] raw key rows, kRawB bytes each
    total = raw + (AS ? 2 * int64_t{kBlock} * kRawB : 0);
  }
};

// Runs of 8 key elements of one staging phase held by a thread between issue and commit.
template <int KB>
struct Inflight {
  Raw8 raw[KB];
  int kd[KB];
};

// f(std::integral_constant<int, i>) for i = 0..N-1 in order.
template <int N, int I = 0, typename F>
__device__ __forceinline__ void static_for(F&& f) {
  if constexpr (I < N) {
    f(std::integral_constant<int, I>{});
    static_for<N, I + 1>(f);
  }
}

// Grid (rows, ceil(H / (16 MT)), CS): CTA z accumulates channel slice z of D / CS (every CTA
// computes the scores and softmax of its heads in full). 4 MT warps, warp w = (m-tile mt = w / 4,
// quarter qw = w % 4): scores of heads 16 mt.. x entries 16 qw..; softmax of heads
// 16 mt + 4 qw + lane / 8, 8 lanes per head, 8 entries each; accumulation of heads 16 mt.. x
// channels z D / CS + qw D / (4 CS)...
template <int D, int MT, int CS, bool AS, bool V4>
__global__ void __launch_bounds__(128 * MT, 1) sparse_tc_kernel(SparseArgs a) {
  using L_t = TcLayout<D, MT, AS, V4>;
  static_assert(!AS || L_t::kRawB % (V4 ? 8 : 16) == 0, "raw rows copied in 16-byte (V4: 8-byte) units");
  constexpr int kNN = D - kV4Rope;  // V4 rows: NoPE dims
  constexpr int kThreads = 128 * MT, kHeads = 16 * MT, kRowB = L_t::kRowB;
  constexpr int kRuns = D / 8;                                      // runs per key row
  constexpr int kCw = D / CS / 4;                                   // channels per warp
  constexpr int kNT = kCw / 8;                                      // n-tiles of 8 channels per warp
  constexpr int kPairs = kNT / 2;
  static_assert(kPairs >= 1, "at least 16 channels per warp");
  // Staging phases: the scores' k steps and the accumulation's n-tile pairs each in kParts parts,
  // one phase per part; a thread keeps kKB runs in flight (more where the accumulators are few),
  // the phase's other runs (if any) loaded and stored before the part.
  constexpr int kParts = kPairs < 4 ? kPairs : 4;
  static_assert((D / 16 / kParts) % 2 == 0 && kPairs % kParts == 0, "whole k-step pairs and n-tile pairs per part");
  constexpr int kPhase = kBlock * kRuns / (2 * kParts);             // runs per staging phase
  constexpr int kKBmax = kNT <= 4 ? 4 : 2, kPer = (kPhase + kThreads - 1) / kThreads;
  constexpr int kKB = kPer < 2 ? 2 : kPer < kKBmax ? kPer : kKBmax;
  constexpr int kChunks = (kPhase + kKB * kThreads - 1) / (kKB * kThreads);
  extern __shared__ __align__(16) unsigned char sm[];
  const int64_t n = a.W + a.n_sel, nb = (n + kBlock - 1) / kBlock;
  const L_t L(n, nb);
  unsigned char* qs = sm + L.q;
  unsigned char* keys = sm + L.keys;
  float* S = reinterpret_cast<float*>(sm + L.s);
  uint16_t* Pb = reinterpret_cast<uint16_t*>(sm + L.pb);
  float* alpha_s = reinterpret_cast<float*>(sm + L.alpha);
  float* den_s = reinterpret_cast<float*>(sm + L.den);
  float* rope_s = reinterpret_cast<float*>(sm + L.rope);
  const void** tptr = reinterpret_cast<const void**>(sm + L.ptr);
  uint8_t* tkind = sm + L.kind;
  uint8_t* valid = sm + L.valid;
  int* vb = reinterpret_cast<int*>(sm + L.vb);
  int32_t* sel_s = reinterpret_cast<int32_t*>(sm + L.sel);
  unsigned char* raw = sm + L.raw;
  __shared__ int nvb_s;

  const int t = threadIdx.x, lane = t & 31, w = t >> 5, mt = w >> 2, qw = w & 3;
  const int g = lane >> 2, c4 = lane & 3;
  const int64_t r = blockIdx.x, h0 = int64_t{blockIdx.y} * kHeads;
  const int c0 = static_cast<int>(blockIdx.z) * (D / CS) + qw * kCw;  // the warp's first channel
  const int64_t p = a.pos[r];
  const int32_t piece = a.row_piece[r];
  // Entry e of the row's list (sel: its topk, -1 in the window part): kind and key row address.
  auto entry = [&](int64_t e, int32_t sel, const void*& ptr) {
    if constexpr (V4) return list_entry_v4(a, a.pieces_v4[piece], p, e, sel, ptr);
    else return list_entry(a, a.pieces[piece], p, e, sel, ptr);
  };
  auto kslot = [](int j) { return AS ? 0 : (j & 1); };  // key buffer of block j

  // Prologue: queries (bf16, zero rows past H), the tail's rotation, the valid blocks.
  for (int i = t; i < kHeads * D / 4; i += kThreads) {
    const int hl = i / (D / 4), k = (i % (D / 4)) * 4;
    const int64_t h = h0 + hl;
    const float4 v = h < a.H ? __ldg(reinterpret_cast<const float4*>(a.q + (r * a.H + h) * D + k)) : float4{};
    const uint2 b{(f32_bits(v.x) >> 16) | (f32_bits(v.y) & 0xffff0000u),
                  (f32_bits(v.z) >> 16) | (f32_bits(v.w) & 0xffff0000u)};
    *reinterpret_cast<uint2*>(qs + hl * kRowB + 2 * k) = b;
  }
  for (int i = t; i < a.n_freq; i += kThreads) rope_cs(p, a.freqs[i], rope_s[2 * i], rope_s[2 * i + 1]);
  for (int64_t b = t; b < nb; b += kThreads) vb[b] = 0;
  __syncthreads();
  for (int64_t e = t; e < n; e += kThreads) {
    const int32_t sel = e >= a.W ? __ldg(a.topk + r * a.n_sel + (e - a.W)) : -1;
    if constexpr (AS) sel_s[e] = sel;
    const void* ptr = nullptr;
    if (entry(e, sel, ptr) != kInvalid) vb[e / kBlock] = 1;
  }
  __syncthreads();
  if (t == 0) {  // in place: the count never passes the block index
    int cnt = 0;
    for (int64_t b = 0; b < nb; ++b)
      if (vb[b]) vb[cnt++] = static_cast<int>(b);
    nvb_s = cnt;
  }
  __syncthreads();
  const int nvb = nvb_s;

  // Entry table slot (j & 1) of valid block j: kinds and key addresses of its 64 entries.
  auto fill = [&](int j) {
    if (t < kBlock) {
      const int64_t e = int64_t{vb[j]} * kBlock + t;
      const void* ptr = nullptr;
      int kd = kInvalid;
      if (e < n) {
        int32_t sel;
        if constexpr (AS) sel = sel_s[e];
        else sel = e >= a.W ? __ldg(a.topk + r * a.n_sel + (e - a.W)) : -1;
        kd = entry(e, sel, ptr);
      }
      tkind[(j & 1) * kBlock + t] = static_cast<uint8_t>(kd);
      tptr[(j & 1) * kBlock + t] = ptr;
    }
  };
  // Staging of block j into buffer j & 1: run i of phase ph is entry i / kRuns, elements
  // 8 (i % kRuns)..+7; chunk ch holds the thread's kKB runs of the phase's ch-th stretch.
  auto issue = [&](Inflight<kKB>& f, int j, int ph, int ch) {
#pragma unroll
    for (int u = 0; u < kKB; ++u) {
      const int i = ch * kKB * kThreads + u * kThreads + t;
      f.kd[u] = kInvalid;
      f.raw[u] = Raw8{};
      if (i < kPhase) {
        const int ii = ph * kPhase + i, e = ii / kRuns;
        f.kd[u] = tkind[(j & 1) * kBlock + e];
        if (f.kd[u] != kInvalid) f.raw[u] = raw8_v4(f.kd[u], tptr[(j & 1) * kBlock + e], D, kNN, int64_t{ii % kRuns} * 8);
      }
    }
  };
  auto commit = [&](const Inflight<kKB>& f, int j, int ph, int ch) {
#pragma unroll
    for (int u = 0; u < kKB; ++u) {
      const int i = ch * kKB * kThreads + u * kThreads + t;
      if (i < kPhase) {
        const int ii = ph * kPhase + i, e = ii / kRuns, k = (ii % kRuns) * 8;
        float v[8];
        decode8(f.kd[u], f.raw[u], v);  // zeros for an invalid entry
        *reinterpret_cast<uint4*>(keys + ((j & 1) * kBlock + e) * kRowB + 2 * k) = pack_bf16x8(v);
        if (k == 0) valid[(j & 1) * kBlock + e] = f.kd[u] != kInvalid;
      }
    }
  };
  // Phase ph of block j's staging around `work`: every chunk but the last loaded and stored
  // before it, the last in flight during it.
  auto phase = [&](bool on, int j, int ph, auto&& work) {
    Inflight<kKB> f;
    if (on) {
      for (int ch = 0; ch + 1 < kChunks; ++ch) {
        issue(f, j, ph, ch);
        commit(f, j, ph, ch);
      }
      issue(f, j, ph, kChunks - 1);
    }
    // Compiler fences: the phase's loads stay ahead of its work, the next phase's behind it (hoisted
    // loads of later phases would hold registers next to the accumulators).
    asm volatile("" ::: "memory");
    work();
    asm volatile("" ::: "memory");
    if (on) commit(f, j, ph, kChunks - 1);
  };

  // AS: the stored key rows (FP8, FP4) of valid block j, raw, into raw slot j & 1 by cp.async (one
  // group per block; rows whose address is not 16-byte aligned are left to copied_decode's loads).
  auto copied = [&](int kd, const void* ptr) {
    if constexpr (V4) return kd == kModel1 && (reinterpret_cast<uintptr_t>(ptr) & 7) == 0;
    else return (kd == kFp8 || kd == kFp4) && (reinterpret_cast<uintptr_t>(ptr) & 15) == 0;
  };
  auto copy_raw = [&](int j) {
    constexpr int kUnit = V4 ? 8 : 16, kUnits = L_t::kRawB / kUnit;
    const int slot = (j & 1) * kBlock;
    const uint32_t raw_base = smem_addr(raw);
    for (int i = t; i < kBlock * kUnits; i += kThreads) {
      const int e = i / kUnits, c = i % kUnits;
      const int kd = tkind[slot + e];
      const void* ptr = tptr[slot + e];
      const int bytes = V4 ? L_t::kRawB : kd == kFp8 ? D + D / 32 : D / 2 + D / 16;
      if (copied(kd, ptr) && kUnit * c < bytes) {
        const uint32_t dst = raw_base + (slot + e) * L_t::kRawB + kUnit * c;
        if constexpr (V4) cp_async8(dst, static_cast<const uint8_t*>(ptr) + 8 * c);
        else cp_async16(dst, static_cast<const uint8_t*>(ptr) + 16 * c);
      }
    }
    cp_async_commit();
  };
  // AS: block j's keys into the key buffer from its raw copies (fresh and unaligned rows from memory).
  auto copied_decode = [&](int j) {
    const int slot = (j & 1) * kBlock, ks = kslot(j) * kBlock;
    for (int i = t; i < kBlock * kRuns; i += kThreads) {
      const int e = i / kRuns, k = (i % kRuns) * 8;
      const int kd = tkind[slot + e];
      const void* ptr = tptr[slot + e];
      const Raw8 rw = copied(kd, ptr) ? raw8_copied(kd, raw + (slot + e) * L_t::kRawB, V4 ? kNN : D, k)
                                      : kd != kInvalid ? raw8_v4(kd, ptr, D, kNN, k) : Raw8{};
      float v[8];
      decode8(kd, rw, v);
      *reinterpret_cast<uint4*>(keys + (ks + e) * kRowB + 2 * k) = pack_bf16x8(v);
      if (k == 0) valid[ks + e] = kd != kInvalid;
    }
  };

  if (nvb > 0) {
    if constexpr (AS) {
      fill(0);
      if (nvb > 1) fill(1);
      __syncthreads();
      copy_raw(0);
      if (nvb > 1) copy_raw(1);
      else cp_async_commit();  // one group per block slot keeps wait_group's count uniform
      cp_async_wait<1>();
      __syncthreads();
      copied_decode(0);
      __syncthreads();
    } else {
      fill(0);
      __syncthreads();
      for (int ph = 0; ph < 2 * kParts; ++ph) phase(true, 0, ph, [] {});
      if (nvb > 1) fill(1);
      __syncthreads();
    }
  }

  float acc[kNT][4];
#pragma unroll
  for (int j = 0; j < kNT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  float m = -1e30f, sum = 0.0f;  // the softmax lanes' head statistics (the 8 lanes of a head agree)
  const int hs = mt * 16 + qw * 4 + (lane >> 3), j8 = lane & 7;  // softmax role
  const uint32_t q_base = smem_addr(qs), k_base = smem_addr(keys), p_base = smem_addr(Pb);
  const float neg_inf = __int_as_float(0xff800000);

  for (int i = 0; i < nvb; ++i) {
    const bool next = i + 1 < nvb;
    const uint32_t kb = k_base + kslot(i) * kBlock * kRowB;
    if (i + 2 < nvb) fill(i + 2);  // slot i & 1: block i is staged already
    if constexpr (AS) {  // block i + 2's raw rows in flight while block i computes
      __syncthreads();
      if (i + 2 < nvb) copy_raw(i + 2);
      else cp_async_commit();
    }
    const bool stage = !AS && next;  // register staging of block i + 1 in the phases below    // Scores in kParts parts (staging phases 0..kParts-1): per n-tile two accumulators, the even
    // and the odd k steps each in ascending order (two independent MMA chains), added at the end.
    float sacc[2][2][4] = {};
    auto scores = [&](int k0, int k1) {  // k0, k1 even
      for (int k2 = k0; k2 < k1; k2 += 2) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int ks = k2 + c;
          uint32_t fa[4], fb[4];
          ldsm_x4(fa, q_base + (mt * 16 + (lane & 15)) * kRowB + 2 * (ks * 16 + 8 * (lane >> 4)));
          ldsm_x4(fb, kb + (qw * 16 + (lane & 7) + 8 * (lane >> 4)) * kRowB + 2 * (ks * 16 + 8 * ((lane >> 3) & 1)));
          mma_bf16(sacc[c][0], fa, fb[0], fb[1]);
          mma_bf16(sacc[c][1], fa, fb[2], fb[3]);
        }
      }
    };
#pragma unroll
    for (int part = 0; part < kParts; ++part)
      phase(stage, i + 1, part, [&] { scores(part * (D / 16 / kParts), (part + 1) * (D / 16 / kParts)); });
#pragma unroll
    for (int jn = 0; jn < 2; ++jn) {
      const int e = qw * 16 + 8 * jn + 2 * c4;
      const uint8_t* vl = valid + kslot(i) * kBlock;
      float* s0 = S + (mt * 16 + g) * kSRow + e;
      float* s1 = s0 + 8 * kSRow;
      float dot[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) dot[u] = __fadd_rn(sacc[0][jn][u], sacc[1][jn][u]);
      s0[0] = vl[e] ? __fmul_rn(dot[0], a.scale) : neg_inf;
      s0[1] = vl[e + 1] ? __fmul_rn(dot[1], a.scale) : neg_inf;
      s1[0] = vl[e] ? __fmul_rn(dot[2], a.scale) : neg_inf;
      s1[1] = vl[e + 1] ? __fmul_rn(dot[3], a.scale) : neg_inf;
    }
    named_sync(1 + mt, 128);
    // Online softmax of head hs: entries 8 j8..8 j8+7 in this lane (exp_f works in double
    // precision: two at a time keep its latency partly hidden without holding many registers).
    {
      const float* srow = S + hs * kSRow + 8 * j8;
      const float4 x0 = *reinterpret_cast<const float4*>(srow), x1 = *reinterpret_cast<const float4*>(srow + 4);
      float bm = fmaxf(fmaxf(fmaxf(x0.x, x0.y), fmaxf(x0.z, x0.w)), fmaxf(fmaxf(x1.x, x1.y), fmaxf(x1.z, x1.w)));
      bm = fmaxf(bm, __shfl_xor_sync(0xffffffffu, bm, 1));
      bm = fmaxf(bm, __shfl_xor_sync(0xffffffffu, bm, 2));
      bm = fmaxf(bm, __shfl_xor_sync(0xffffffffu, bm, 4));
      const float mb = fmaxf(m, bm);
      const float al = exp_f(__fsub_rn(m, mb));
      uint16_t* prow = Pb + hs * kPRow + 8 * j8;
      float ps = 0.0f;
#pragma unroll 2
      for (int u = 0; u < 8; ++u) {
        const float pe = exp_f(__fsub_rn(srow[u], mb));
        ps = __fadd_rn(ps, pe);
        prow[u] = static_cast<uint16_t>(f32_bits(rb(pe)) >> 16);
      }
      ps = __fadd_rn(ps, __shfl_xor_sync(0xffffffffu, ps, 1));
      ps = __fadd_rn(ps, __shfl_xor_sync(0xffffffffu, ps, 2));
      ps = __fadd_rn(ps, __shfl_xor_sync(0xffffffffu, ps, 4));
      sum = __fadd_rn(__fmul_rn(sum, al), ps);
      m = mb;
      if (j8 == 0) alpha_s[hs] = al;
    }
    named_sync(1 + mt, 128);
    // acc = acc * alpha + bf16(P) V, the channels in kParts parts (staging phases kParts..).
    {
      const float al0 = alpha_s[mt * 16 + g], al1 = alpha_s[mt * 16 + g + 8];
#pragma unroll
      for (int j = 0; j < kNT; ++j) {
        acc[j][0] = __fmul_rn(acc[j][0], al0);
        acc[j][1] = __fmul_rn(acc[j][1], al0);
        acc[j][2] = __fmul_rn(acc[j][2], al1);
        acc[j][3] = __fmul_rn(acc[j][3], al1);
      }
      // Per k step (16 entries, ascending): the P fragment, then the n-tiles of the part.
      auto pv = [&](auto lo, auto hi) {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          uint32_t fp[4];
          ldsm_x4(fp, p_base + (mt * 16 + (lane & 15)) * (kPRow * 2) + 2 * (kk * 16 + 8 * (lane >> 4)));
#pragma unroll
          for (int jp = decltype(lo)::value; jp < decltype(hi)::value; ++jp) {
            uint32_t fb[4];
            ldsm_x4_t(fb, kb + (kk * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * kRowB +
                              2 * (c0 + jp * 16 + 8 * (lane >> 4)));
            mma_bf16(acc[2 * jp], fp, fb[0], fb[1]);
            mma_bf16(acc[2 * jp + 1], fp, fb[2], fb[3]);
          }
        }
      };
      static_for<kParts>([&](auto part) {
        constexpr int lo = decltype(part)::value * (kPairs / kParts), hi = lo + kPairs / kParts;
        phase(stage, i + 1, kParts + decltype(part)::value,
              [&] { pv(std::integral_constant<int, lo>{}, std::integral_constant<int, hi>{}); });
      });
    }
    if constexpr (AS) {
      if (next) {  // block i + 1's raw rows have landed (only block i + 2's group may still fly)
        cp_async_wait<1>();
        __syncthreads();
        copied_decode(i + 1);
      }
    }
    __syncthreads();  // buffer i & 1, the scores and the table slots are free again
  }

  // Denominators with the sinks, then o = bf16(acc / sum), the tail rotated back at p.
  if (j8 == 0) den_s[hs] = h0 + hs < a.H ? __fadd_rn(sum, exp_f(__fsub_rn(a.sink[h0 + hs], m))) : 1.0f;
  __syncthreads();
  const int64_t hpg = a.H / a.G, tail = D - 2 * int64_t{a.n_freq};
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int hl = mt * 16 + g + 8 * half;
    const int64_t h = h0 + hl;
    if (h >= a.H) continue;
    const float den = den_s[hl];
    float* out = a.o + ((h / hpg) * a.rows + r) * hpg * D + (h % hpg) * D;
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
      const int64_t ch = c0 + 8 * j + 2 * c4;
      float o0 = rb(acc[j][2 * half] / den), o1 = rb(acc[j][2 * half + 1] / den);
      if (ch >= tail) {
        const float* cs = rope_s + (ch - tail);  // pair (ch - tail) / 2: cos, sin
        rope_pair(o0, o1, cs[0], -cs[1]);
      }
      *reinterpret_cast<float2*>(out + ch) = make_float2(o0, o1);
    }
  }
}

template <int D, int MT, int CS, bool AS, bool V4>
cudaError_t launch_tc(const SparseArgs& a, cudaStream_t s) {
  const int64_t n = a.W + a.n_sel, nb = (n + kBlock - 1) / kBlock;
  const size_t shm = static_cast<size_t>(TcLayout<D, MT, AS, V4>(n, nb).total);
  if (shm > kMaxSmem) return cudaErrorInvalidValue;
  const cudaError_t e = cudaFuncSetAttribute(sparse_tc_kernel<D, MT, CS, AS, V4>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shm));
  if (e != cudaSuccess) return e;
  const unsigned groups = static_cast<unsigned>((a.H + 16 * MT - 1) / (16 * MT));
  sparse_tc_kernel<D, MT, CS, AS, V4><<<dim3(static_cast<unsigned>(a.rows), groups, CS), 128 * MT, shm, s>>>(a);
  return cudaGetLastError();
}

// CTAs of 16 heads at D = 512 (the release's head dim) copy stored key rows by cp.async where the
// raw slots fit in shared memory; other shapes stage through registers.
template <int D, int CS, bool V4>
cudaError_t launch_narrow(const SparseArgs& a, cudaStream_t s) {
  if constexpr (D == 512) {
    const int64_t n = a.W + a.n_sel;
    if (TcLayout<D, 1, true, V4>(n, (n + kBlock - 1) / kBlock).total + 1024 <= kMaxSmem)  // 1 KiB: static shared memory
      return launch_tc<D, 1, CS, true, V4>(a, s);
  }
  return launch_tc<D, 1, CS, false, V4>(a, s);
}

// The grid by row count (the bits are the same for every choice: see the top of the file):
//   - from kWideRows rows (prefill), CTAs of 32 heads when H allows, each block's keys staged by
//     half as many CTAs as with 16 (four m-tiles per CTA would need 512 threads, whose 128
//     registers do not hold the 64 accumulators per thread and the staging without spills);
//   - below kSplitRows rows (decode, verify windows), CTAs of 16 heads and a quarter of the
//     channels each (scores recomputed per quarter), for more CTAs than rows x heads / 16;
//   - else CTAs of 16 heads and every channel;
//   - CTAs of 16 heads at D = 512 copy the stored key rows by cp.async (launch_narrow).
constexpr int64_t kWideRows = 32;
constexpr int64_t kSplitRows = 8;

template <int D, bool V4 = false>
cudaError_t launch_d(const SparseArgs& a, cudaStream_t s) {
  if (a.H % 32 == 0 && a.rows >= kWideRows) return launch_tc<D, 2, 1, false, V4>(a, s);
  if constexpr (D >= 256) {
    if (a.rows < kSplitRows) return launch_narrow<D, 4, V4>(a, s);
  }
  return launch_narrow<D, 1, V4>(a, s);
}
}  // namespace

cudaError_t sparse::tensor_core(const SparseArgs& a, cudaStream_t s) {
  if (a.rows > 0x7fffffff || a.W + a.n_sel == 0) return cudaErrorInvalidValue;
  switch (a.d) {
    case 64: return launch_d<64>(a, s);
    case 128: return launch_d<128>(a, s);
    case 256: return launch_d<256>(a, s);
    case 512: return launch_d<512>(a, s);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t sparse::tensor_core_v4(const SparseArgs& a, cudaStream_t s) {
  if (a.rows > 0x7fffffff || a.W + a.n_sel == 0 || a.rd != kV4Rope || a.pieces_v4 == nullptr) return cudaErrorInvalidValue;
  switch (a.d) {
    case 128: return launch_d<128, true>(a, s);
    case 512: return launch_d<512, true>(a, s);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace dsv4::cuda
