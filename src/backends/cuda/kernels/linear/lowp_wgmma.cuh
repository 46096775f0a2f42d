// The many-row GEMM of the FP8 / FP4 linears on Hopper's warpgroup MMA (wgmma, sm_90a). A CTA of two
// warpgroups takes 128 weight columns x NR quantized rows (64 or 128): each warpgroup 64 columns (the MMA's M
// side, A from registers) x the NR rows (its N side, B from shared memory). Each 32-wide chunk is lowp_mma.cuh's
// f16 pair as two wgmma.m64nNRk16, the first from zero and the second accumulating, with the A registers
// a_regs gives the mma.sync pair and the B slots holding the same k: the same chunk sums (bench/gpu/mma_rates
// compares the two forms bit for bit), then the same scale products, chunk order and slice fold as
// gemm_tile, so a row gets the bits of every other kernel.
//
// The rows come quantized in slot order (quant_rows<F, true>): per chunk, MMA 0's 16 k slots then MMA 1's,
// each slot holding the k the pair order gives it (slot_pos). B in shared memory is K-major without swizzle:
// per chunk and MMA, 8-row x 8-slot core matrices of 128 contiguous bytes, the two slot halves kWgLbo bytes
// apart, successive groups of 8 rows kWgSbo apart. Weights arrive raw (gemm_tile's stage layout) and each
// warp forms its A registers from them. Chunk c + 1's MMAs run while chunk c's partials are scaled; the slice
// fold's sums live in shared memory (registers go to the two chunks in flight).
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/kernels/linear/lowp_gemm.cuh"

namespace dsv4::cuda::lowp {

constexpr int kWgThreads = 256;  // two warpgroups of 64 weight columns
constexpr int kWgStages = 3;
constexpr int kWgLbo = 128, kWgSbo = 256;
template <int NR> constexpr int kWgHalf = NR * 16 * 2;  // bytes of one MMA's B: NR rows x 16 slots of f16

// One stage: the 128 columns' raw weight bytes (gemm_tile's layout, w_chunk_off), the rows' f16 codes as
// B [4 chunks][2 MMAs][NR / 8 row groups][2 slot halves][8 rows][16 bytes], the rows' chunk scales float
// [4][NR] and the columns' scale factors float [4][128] (gemm_tile's table). After the stages, the slice fold's
// running sums float [NR / 2][256] (a thread's i-th at i * 256 + thread).
template <Fmt F, int NR>
struct WgLayout {
  static constexpr int kW = kGCols * kGColBytes<F>;
  static constexpr int kBChunk = 2 * kWgHalf<NR>;
  static constexpr int kB = kGStageChunks * kBChunk;
  static constexpr int kXs = NR * kGStageChunks * 4;
  static constexpr int kWs = kGStageChunks * kGCols * 4;
  static constexpr int kBOff = kW, kXsOff = kBOff + kB, kWsOff = kXsOff + kXs, kStage = kWsOff + kWs;
  static constexpr int kTot = NR / 2 * kWgThreads * 4;
  static constexpr size_t kBytes = size_t(kWgStages) * kStage + kTot;
};

// Byte offset, within a chunk's B, of row r's 16-byte piece u (slots 8u .. 8u+7 of the chunk in slot order).
template <int NR>
__device__ __forceinline__ int wg_b_off(int r, int u) {
  return (u >> 1) * kWgHalf<NR> + (r >> 3) * kWgSbo + (u & 1) * kWgLbo + (r & 7) * 16;
}

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DSV4_WGMMA 1
#endif

// The shared-memory matrix descriptor of a B operand at p (16-byte aligned): this layout, no swizzle.
__device__ __forceinline__ uint64_t wg_desc(const void* p) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  return uint64_t((a & 0x3FFFF) >> 4) | (uint64_t(kWgLbo >> 4) << 16) | (uint64_t(kWgSbo >> 4) << 32);
}

// Registers the compiler must treat as read and written here (the warpgroup MMA reads and writes them
// asynchronously, between its issue and the wait that retires it).
template <int N>
__device__ __forceinline__ void wg_touch(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void wg_touch(uint32_t (&a)[8]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) asm volatile("" : "+r"(a[i])::"memory");
}

#define DSV4_W8(b) "+f"(d[b]), "+f"(d[b + 1]), "+f"(d[b + 2]), "+f"(d[b + 3]), "+f"(d[b + 4]), "+f"(d[b + 5]), \
                   "+f"(d[b + 6]), "+f"(d[b + 7])
// d = A B (h = 0) or A B + d (h = 1): one wgmma.m64nNk16 f16 with A from registers, N = 2 x (d's size).
__device__ __forceinline__ void wg_mma(float (&d)[32], const uint32_t* a, uint64_t desc, int h) {
#ifdef DSV4_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,"
      "%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}\n"
      : DSV4_W8(0), DSV4_W8(8), DSV4_W8(16), DSV4_W8(24)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(h)
      : "memory");
#else
  (void)d, (void)a, (void)desc, (void)h;
  __trap();
#endif
}
__device__ __forceinline__ void wg_mma(float (&d)[64], const uint32_t* a, uint64_t desc, int h) {
#ifdef DSV4_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,"
      "%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,"
      "%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 0;\n}\n"
      : DSV4_W8(0), DSV4_W8(8), DSV4_W8(16), DSV4_W8(24), DSV4_W8(32), DSV4_W8(40), DSV4_W8(48), DSV4_W8(56)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(h)
      : "memory");
#else
  (void)d, (void)a, (void)desc, (void)h;
  __trap();
#endif
}
#undef DSV4_W8

// d = A1 B1 + (A0 B0 + 0): one chunk's two MMAs (a: A0 in 0..3, A1 in 4..7; b: the chunk's B, NR rows), issued
// as one commit group; the caller waits for it (wg_wait) before reading d or writing a.
template <int NR>
__device__ __forceinline__ void wg_chunk_issue(float (&d)[NR / 2], uint32_t (&a)[8], const uint8_t* b) {
#ifdef DSV4_WGMMA
  wg_touch(d);
  wg_touch(a);
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  wg_mma(d, a, wg_desc(b), 0);
  wg_mma(d, a + 4, wg_desc(b + kWgHalf<NR>), 1);
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
  (void)d, (void)a, (void)b;
  __trap();
#endif
}

// Waits until at most N commit groups of this warpgroup are pending.
template <int N>
__device__ __forceinline__ void wg_wait() {
#ifdef DSV4_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}

// Makes this thread's generic-proxy shared-memory writes (the cp.async copies it waited for) visible to the
// warpgroup MMA's reads once a barrier follows.
__device__ __forceinline__ void wg_proxy_fence() {
#ifdef DSV4_WGMMA
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// gemm_tile's contract with NR-row tiles (64 or 128): columns [cta_col, cta_col + 128) of W for rows
// 0 .. nrows-1 (nrows <= NR) of the tile whose quantized rows (slot order) are Q's rows row0 .. row0 + NR - 1.
// kWgThreads threads, WgLayout<F, NR>::kBytes of shared memory at smem. emit(r, col, v) once per valid (row,
// column).
template <Fmt F, int NR, typename Emit>
__device__ __forceinline__ void gemm_wg_tile(const QuantRows& Q, int64_t row0, int nrows, const LowpWeight& W,
                                             int act_block, int kw, int64_t cta_col, uint8_t* smem, Emit emit) {
  using L = WgLayout<F, NR>;
  constexpr int S = kWgStages, ND = NR / 2;
  constexpr bool kBlk = F == Fmt::fp8;  // one column scale per 32 columns (gemm_takes)
  const int tid = threadIdx.x, wg = tid >> 7, w = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, q = lane & 3;
  const int units = static_cast<int>(W.in / act_block), uc = act_block / kChunk;
  const int nchunks = static_cast<int>(W.in / kChunk), nst = (nchunks + kGStageChunks - 1) / kGStageChunks;
  const int ncols = static_cast<int>(W.out - cta_col < kGCols ? W.out - cta_col : kGCols);
  const uint8_t* wbase = W.w + cta_col * W.row_bytes;
  const int64_t xs_stride = Q.kp / kChunk;
  const int j0 = 64 * wg + 16 * w + g;  // this thread's columns j0 and j0 + 8 of the CTA's 128
  float* const tot = reinterpret_cast<float*>(smem + S * L::kStage) + tid;  // its i-th sum at tot[256 i]

  // The scale tables, loaded with a stage's copies into registers and written to the stage one issue later
  // (gemm_tile's scheme): the columns' factors (ColScales), and the rows' chunk scales transposed to [chunk][row].
  ColScales<F> scales(W, cta_col, tid);
  float4 xraw = make_float4(0.f, 0.f, 0.f, 0.f);
  float* xs_pending = nullptr;
  auto flush_scales = [&]() {
    scales.flush();
    if (xs_pending == nullptr) return;
    if (tid < NR) {
      float* sxs = xs_pending + tid;
      sxs[0] = xraw.x, sxs[NR] = xraw.y, sxs[2 * NR] = xraw.z, sxs[3 * NR] = xraw.w;
    }
    xs_pending = nullptr;
  };

  // Stage t (chunks 4t .. 4t + pc - 1) into slot t % S; one commit group per call, empty past the end.
  auto issue = [&](int t) {
    if (t < nst) {
      const int slot = t % S, pc = min(kGStageChunks, nchunks - t * kGStageChunks);
      uint8_t* st = smem + slot * L::kStage;
      gemm_copy_weights<F, kWgThreads>(st, wbase, W, ncols, t, pc, tid);
      // The rows' pieces, 8 consecutive rows of one piece per 8 threads (128 contiguous bytes of B).
      constexpr int kXPieces = kGStageChunks * 4;  // 16-byte pieces of a row's stage (4 per chunk)
#pragma unroll
      for (int k = 0; k < NR * kXPieces / kWgThreads; ++k) {
        const int i = tid + k * kWgThreads, u = i / NR, r = i - u * NR;
        cp_async16(st + L::kBOff + (u >> 2) * L::kBChunk + wg_b_off<NR>(r, u & 3),
                   Q.xq + (row0 + r) * Q.kp + int64_t(t) * kGStageK + 8 * u);
      }
      flush_scales();
      scales.load(t, pc, reinterpret_cast<float*>(st + L::kWsOff));
      if (tid < NR)
        xraw = __ldg(reinterpret_cast<const float4*>(Q.xs + (row0 + tid) * xs_stride + t * kGStageChunks));
      xs_pending = reinterpret_cast<float*>(st + L::kXsOff);
    }
    cp_async_commit();
  };

  float d[2][ND], acc[ND];
  uint32_t a[2][8];
#pragma unroll
  for (int i = 0; i < ND; ++i) d[0][i] = 0.f, d[1][i] = 0.f, acc[i] = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) a[0][i] = 0u, a[1][i] = 0u;
  int slice = 0, next_bound = slice_begin(1, units, kw) * uc;
  auto fold = [&]() {  // slice `slice` is complete: tot = acc_0, then tot + acc_s; acc restarts from zero
#pragma unroll
    for (int i = 0; i < ND; ++i) {
      tot[kWgThreads * i] = slice == 0 ? acc[i] : __fadd_rn(tot[kWgThreads * i], acc[i]);
      acc[i] = 0.f;
    }
    ++slice;
    next_bound = slice_begin(slice + 1, units, kw) * uc;
  };

  for (int t = 0; t < S - 1; ++t) {
    issue(t);
    flush_scales();  // the prologue's scales go in at once
  }
  for (int t = 0; t < nst; ++t) {
    cp_async_wait<S - 2>();  // stage t's copies by this thread have landed
    flush_scales();
    wg_proxy_fence();
    __syncthreads();  // ... every thread's; slot (t - 1) % S is free (its MMAs were retired last stage)
    issue(t + S - 1);
    const uint8_t* st = smem + (t % S) * L::kStage;
    const float* sxs = reinterpret_cast<const float*>(st + L::kXsOff);
    const float* tab = reinterpret_cast<const float*>(st + L::kWsOff);
    const int pc = min(kGStageChunks, nchunks - t * kGStageChunks);

    // Chunk cc's A registers from the raw weights (a_regs, as the mma.sync pair forms them), then its MMAs.
    auto start = [&](int cc, float (&dd)[ND], uint32_t (&aa)[8]) {
      uint32_t a0[4], a1[4];
      gemm_a_regs<F>(st, j0, cc, q, a0, a1);
#pragma unroll
      for (int i = 0; i < 4; ++i) aa[i] = a0[i], aa[4 + i] = a1[i];
      wg_chunk_issue<NR>(dd, aa, st + L::kBOff + cc * L::kBChunk);
    };
    // Chunk cc's partials (retired) into acc: acc = fma(d, xs * ws, acc), gemm_tile's products. Thread (g, q)
    // holds d[4 j + e] = (column j0 + 8 (e >> 1), row 8 j + 2 q + (e & 1)).
    auto finish = [&](int cc, float (&dd)[ND]) {
      const float* xs = sxs + cc * NR + 2 * q;
      if constexpr (kBlk) {
        const float wb = tab[cc * kGCols + 64 * wg + 32 * (w >> 1)];
#pragma unroll
        for (int j = 0; j < ND / 4; ++j) {
          const float2 x = *reinterpret_cast<const float2*>(xs + 8 * j);
          const float p0 = __fmul_rn(x.x, wb), p1 = __fmul_rn(x.y, wb);
          acc[4 * j + 0] = __fmaf_rn(dd[4 * j + 0], p0, acc[4 * j + 0]);
          acc[4 * j + 1] = __fmaf_rn(dd[4 * j + 1], p1, acc[4 * j + 1]);
          acc[4 * j + 2] = __fmaf_rn(dd[4 * j + 2], p0, acc[4 * j + 2]);
          acc[4 * j + 3] = __fmaf_rn(dd[4 * j + 3], p1, acc[4 * j + 3]);
        }
      } else {
        const float w0 = tab[cc * kGCols + j0], w1 = tab[cc * kGCols + j0 + 8];
#pragma unroll
        for (int j = 0; j < ND / 4; ++j) {
          const float2 x = *reinterpret_cast<const float2*>(xs + 8 * j);
          acc[4 * j + 0] = __fmaf_rn(dd[4 * j + 0], __fmul_rn(x.x, w0), acc[4 * j + 0]);
          acc[4 * j + 1] = __fmaf_rn(dd[4 * j + 1], __fmul_rn(x.y, w0), acc[4 * j + 1]);
          acc[4 * j + 2] = __fmaf_rn(dd[4 * j + 2], __fmul_rn(x.x, w1), acc[4 * j + 2]);
          acc[4 * j + 3] = __fmaf_rn(dd[4 * j + 3], __fmul_rn(x.y, w1), acc[4 * j + 3]);
        }
      }
    };
    // A slice ends before chunk bpos of this stage when bpos < pc (at most once per stage: k_slices gives
    // every slice at least 8 chunks); stages without one carry no fold code (speed only).
    const int bpos = next_bound - t * kGStageChunks;
    if (pc == kGStageChunks && bpos >= pc) {
      start(0, d[0], a[0]);
      start(1, d[1], a[1]);
      wg_wait<1>(), wg_touch(d[0]), wg_touch(a[0]);
      finish(0, d[0]);
      start(2, d[0], a[0]);
      wg_wait<1>(), wg_touch(d[1]), wg_touch(a[1]);
      finish(1, d[1]);
      start(3, d[1], a[1]);
      wg_wait<1>(), wg_touch(d[0]), wg_touch(a[0]);
      finish(2, d[0]);
      wg_wait<0>(), wg_touch(d[1]), wg_touch(a[1]);
      finish(3, d[1]);
    } else {
#pragma unroll 1
      for (int cc = 0; cc < pc; ++cc) {
        start(cc, d[0], a[0]);
        wg_wait<0>(), wg_touch(d[0]), wg_touch(a[0]);
        if (cc == bpos) fold();
        finish(cc, d[0]);
      }
    }
  }
  cp_async_wait<0>();  // no copy outstanding when the CTA moves on (its shared memory is reused)
  __syncthreads();
  fold();  // the last slice
#pragma unroll
  for (int i = 0; i < ND; ++i) {
    const int64_t col = cta_col + j0 + 8 * ((i >> 1) & 1);
    const int r = 8 * (i >> 2) + 2 * q + (i & 1);
    if (col < W.out && r < nrows) emit(r, col, tot[kWgThreads * i]);
  }
}

// A many-row GEMM kernel's launch shape for both forms (kWg: gemm_wg_tile; else gemm_tile), 32 NT-row tiles:
// its shared memory and the CTAs per SM its __launch_bounds__ asks for.
template <Fmt F, bool kWg, int NT>
constexpr size_t kGemmSmem = kWg ? WgLayout<F, kGRows<NT>>::kBytes : GemmLayout<F, NT>::kBytes;
template <bool kWg, int NT> constexpr int kGemmMinBlocks = kWg ? 1 : kGMinBlocks<NT>;
static_assert(kWgThreads == kGThreads, "both forms launch kGThreads threads");

// gemm_tile or gemm_wg_tile (kWg) with the same arguments.
template <Fmt F, bool kWg, int NT, typename Emit>
__device__ __forceinline__ void gemm_form_tile(const QuantRows& Q, int64_t row0, int nrows, const LowpWeight& W,
                                               int act_block, int kw, int64_t cta_col, uint8_t* smem, Emit emit) {
  if constexpr (kWg) gemm_wg_tile<F, kGRows<NT>>(Q, row0, nrows, W, act_block, kw, cta_col, smem, emit);
  else gemm_tile<F, NT>(Q, row0, nrows, W, act_block, kw, cta_col, smem, emit);
}

// Host side (lowp_gemm.cu): whether the many-row GEMM runs gemm_wg_tile: the device is sm_90 (this build
// carries sm_90a code) and DSV4_LOWP_WGMMA=1 / set_lowp_gemm_wgmma(true) switched it on (off by default). Its row tile
// (32 NT rows, NT 2 or 4) for `rows` rows of `col_tiles` column tiles on `sms` SMs, and for the routed experts'
// n_pairs pairs (speed only; set_lowp_gemm_tile_rows's 64 or 128 forces it).
bool wg_enabled();
int wg_nt(int64_t rows, int64_t col_tiles, int sms);
int wg_experts_nt(int64_t n_pairs);

}  // namespace dsv4::cuda::lowp
