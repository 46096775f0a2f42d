// bf16 linears on tensor cores: "swap AB" mma.sync m16n8k16 (bf16 in, fp32 accumulate) with weight
// columns on the M side and activation rows on the N side; one per-element instruction sequence for
// every row count (row passes of up to 8 rows for short launches, 128 x 128 tiles for prefill).
#include "backends/cuda/exl3/exl3_view.h"
#include "backends/cuda/kernels/linear/linear.cuh"

#include <algorithm>

#include "core/bf16.h"

namespace dsv4::cuda {
namespace {

// The arithmetic of one output element y[row, col] (every kernel here reproduces it bit for bit):
//   K splits into 32-wide chunks (the last zero-padded) and the chunks into kw contiguous slices
//   (bf16_slices: a function of the weight's shape only; every slice non-empty);
//   in slice s, acc_s = 0, then for each chunk c in increasing order
//     d = mma(A1 B1, mma(A0 B0, 0))   (the chunk's 32 exact bf16 x bf16 products; fixed fragment layout)
//     acc_s = acc_s + d               (fp32, round to nearest: the tensor core's own accumulation,
//                                      not IEEE, never runs longer than one chunk)
//   tot = acc_0, then tot = tot + acc_s for s = 1 .. kw-1;  y = round_bf16(tot).
// Fragment layout, lane = 4 g + q: thread (g, q) holds physical k 8q .. 8q+7 of a chunk for weight
// columns g and g+8 and activation row g; MMA 0 takes k 8q .. 8q+3 (as its k 2q, 2q+1, 2q+8, 2q+9),
// MMA 1 k 8q+4 .. 8q+7; D holds columns g, g+8 of rows 2q, 2q+1.
constexpr int kChunk = 32;
constexpr int kMaxSlices = 16;   // warps per CTA of the row kernel
constexpr int kPassRows = 8;     // the MMA's N side: rows per pass of the row kernel
// Launches of more rows take the tile kernel: 64, and 16 for grouped launches (H200, linear_bench tile
// sweep in docs/perf.md: wo_a grouped 8 x [1024, 4096] at 24 / 32 / 64 rows 128.6 / 167.9 / 325.7 us on
// the row kernel, 90-92 on the tiles). set_bf16_tile_rows overrides both in benchmarks.
constexpr int kRowKernelMax = 64, kGroupedRowKernelMax = 16;
int64_t g_row_kernel_max = 0;
constexpr int kRing = 8;         // weight chunks in flight per thread (row kernel), cp.async into shared memory

// K slices for `out` columns and `chunks` chunks: enough warps (16-column tiles x slices, at least
// 256 when the shape allows) that a batch-1 launch streams the weight from every SM at once; each
// slice at least 4 chunks.
int bf16_slices(int64_t out, int chunks) {
  const int64_t tiles = (out + 15) / 16;
  int kw = 1;
  while (kw < kMaxSlices && tiles * kw < 256 && chunks >= 8 * kw) kw *= 2;
  return kw;
}

__host__ __device__ inline int slice_begin(int s, int chunks, int kw) {
  return static_cast<int>((static_cast<int64_t>(s) * chunks) / kw);
}

// Two floats holding bf16 values as one bf16x2 register (lower k in the low half).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// d = A B + c, m16n8k16, bf16 inputs, f32 accumulate (sm_80+).
__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1, const float (&c)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#else
  __trap();
#endif
}

// One chunk: acc += mma(A1 B1, mma(A0 B0, 0)); w0 / w1: the 8 bf16 of columns g / g+8, b: the 8
// bf16 of row g (as bf16x2 pairs in k order).
__device__ __forceinline__ void chunk_mma(const uint4& w0, const uint4& w1, const uint4& b, float (&acc)[4]) {
  const float z[4] = {0.f, 0.f, 0.f, 0.f};
  float t[4], d[4];
  mma_bf16(t, w0.x, w1.x, w0.y, w1.y, b.x, b.y, z);
  mma_bf16(d, w0.z, w1.z, w0.w, w1.w, b.z, b.w, t);
#pragma unroll
  for (int e = 0; e < 4; ++e) acc[e] = __fadd_rn(acc[e], d[e]);
}

// A launch: G groups of a block-diagonal weight; group g reads x + g x_group (row r at + r in),
// weight w + g w_group ([out, in]) and writes y[r y_row + g y_group + n].
struct Bf16Args {
  const float* x;
  const uint16_t* w;
  float* y;
  int64_t x_group, w_group, y_row, y_group;
  int64_t rows, out, in;
  int chunks, kw;
};

// 16 bytes global -> shared, asynchronous; zeros (nothing read) when !valid.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

template <bool kRound>
__device__ __forceinline__ void emit(float* y, int64_t row, int64_t y_row, int64_t col, float v) {
  y[row * y_row + col] = kRound ? round_bf16(v) : v;
}

// Row kernel: one CTA per (16 columns, group), warp s owning K slice s. Each thread streams its own
// 32 bytes per chunk (columns g and g+8, k 8q .. 8q+7) through kRing private shared-memory slots by
// cp.async, so kRing chunks per warp are in flight without holding registers. Rows in passes of up
// to `rt`, each warp staging its slice of the pass's rows as bf16 (row stride `stride` elements, 64
// bytes off a 128-byte multiple: conflict-free 16-byte fragment loads).
// Shared memory: partials float4 [kw][32], ring uint4 [kw][kRing][2][32], rows bf16 [kw][rt][stride].
template <bool kRound>
__global__ void __launch_bounds__(kMaxSlices * 32) bf16_rows_kernel(Bf16Args a, int rt, int stride) {
  extern __shared__ float4 smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int kw = a.kw;
  float4* part = smem;
  uint4* ring_all = reinterpret_cast<uint4*>(part + kw * 32);
  uint4* ring = ring_all + warp * kRing * 64 + lane;  // slot t: ring[64 t] (column g), ring[64 t + 32] (g + 8)
  uint16_t* xs = reinterpret_cast<uint16_t*>(ring_all + kw * kRing * 64) + warp * rt * stride;
  const int64_t grp = blockIdx.y;
  const float* x = a.x + grp * a.x_group;
  const uint16_t* w = a.w + grp * a.w_group;
  float* y = a.y + grp * a.y_group;
  const int c0 = slice_begin(warp, a.chunks, kw), c1 = slice_begin(warp + 1, a.chunks, kw);
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * 16 + g;
  const bool ok0 = col0 < a.out, ok1 = col0 + 8 < a.out;
  const uint16_t* p0 = w + (ok0 ? col0 : 0) * a.in + 8 * q;
  const uint16_t* p1 = w + (ok1 ? col0 + 8 : 0) * a.in + 8 * q;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  auto issue = [&](int c, int t) {  // chunk c into slot t (one commit group, empty past the slice)
    if (c < c1) {
      const int64_t k = static_cast<int64_t>(c) * kChunk;
      const bool kin = k + 8 * q < a.in;
      cp_async16(ring + 64 * t, ok0 && kin ? p0 + k : p0, ok0 && kin);
      cp_async16(ring + 64 * t + 32, ok1 && kin ? p1 + k : p1, ok1 && kin);
    }
    cp_async_commit();
  };
  const int units = (c1 - c0) * (kChunk / 8);  // 8-element units of this warp's slice
  for (int64_t r0 = 0; r0 < a.rows; r0 += rt) {
    const int R = static_cast<int>(std::min<int64_t>(rt, a.rows - r0));
#pragma unroll
    for (int t = 0; t < kRing; ++t) issue(c0 + t, t);
    for (int item = lane; item < R * units; item += 32) {  // stage: zeros past `in`
      const int r = item / units, u = item - r * units;
      const int64_t k = static_cast<int64_t>(c0) * kChunk + 8 * u;
      uint4 v = zero;
      if (k < a.in) {
        const float4* src = reinterpret_cast<const float4*>(x + (r0 + r) * a.in + k);
        const float4 f0 = src[0], f1 = src[1];
        v = make_uint4(pack_bf16x2(f0.x, f0.y), pack_bf16x2(f0.z, f0.w), pack_bf16x2(f1.x, f1.y), pack_bf16x2(f1.z, f1.w));
      }
      *reinterpret_cast<uint4*>(xs + r * stride + 8 * u) = v;
    }
    __syncwarp();
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int c = c0; c < c1; ++c) {
      const int t = (c - c0) & (kRing - 1);
      cp_async_wait<kRing - 1>();  // chunk c's group (this thread's own bytes) has landed
      const uint4 w0 = ring[64 * t], w1 = ring[64 * t + 32];
      const uint4 b = g < R ? *reinterpret_cast<const uint4*>(xs + g * stride + (c - c0) * kChunk + 8 * q) : zero;
      chunk_mma(w0, w1, b, acc);
      issue(c + kRing, t);
    }
    cp_async_wait<0>();
    part[warp * 32 + lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    __syncthreads();
    if (warp == 0) {  // slices in order: tot = acc_0, then + acc_s
      float4 t = part[lane];
      for (int s = 1; s < kw; ++s) {
        const float4 v = part[s * 32 + lane];
        t.x = __fadd_rn(t.x, v.x), t.y = __fadd_rn(t.y, v.y), t.z = __fadd_rn(t.z, v.z), t.w = __fadd_rn(t.w, v.w);
      }
      if (2 * q < R) {
        if (ok0) emit<kRound>(y, r0 + 2 * q, a.y_row, col0, t.x);
        if (ok1) emit<kRound>(y, r0 + 2 * q, a.y_row, col0 + 8, t.z);
      }
      if (2 * q + 1 < R) {
        if (ok0) emit<kRound>(y, r0 + 2 * q + 1, a.y_row, col0, t.y);
        if (ok1) emit<kRound>(y, r0 + 2 * q + 1, a.y_row, col0 + 8, t.w);
      }
    }
    __syncthreads();
  }
}

// Tile kernel: (WM MI 16) weight columns x (WN NI 8) rows per CTA, WM x WN warps of (MI 16) columns
// x (NI 8) rows, one chunk per pipeline stage (weights as bf16 and rows as fp32 by cp.async,
// kStages deep); the slice folds happen at the same chunk boundaries as the row kernel's. Launched
// as 128 columns x 64 rows (8 warps of 32 x 32, two CTAs per SM): 147 TFLOP/s on the grouped wo_a
// at 2,048 rows on an H200, against 140 for 128 x 128 tiles of 64 x 32 warps (docs/perf.md).
constexpr int kStages = 4;
constexpr int kXStride = kChunk + 4;  // floats per staged row: 16 bytes of pad, conflict-free float4 reads

template <int WM, int WN, int MI, int NI>
struct TileShape {
  static constexpr int kBM = WM * MI * 16, kBN = WN * NI * 8, kThreads = WM * WN * 32;
  static constexpr int kWBytes = kBM * kChunk * 2, kXBytes = kBN * kXStride * 4, kStageBytes = kWBytes + kXBytes;
  static constexpr int kSmem = kStages * kStageBytes;
  static constexpr int kMinBlocks = MI * NI >= 16 ? 1 : 2;
};

template <bool kRound, int WM, int WN, int MI, int NI>
__global__ void __launch_bounds__(TileShape<WM, WN, MI, NI>::kThreads, TileShape<WM, WN, MI, NI>::kMinBlocks)
    bf16_tile_kernel(Bf16Args a) {
  using S = TileShape<WM, WN, MI, NI>;
  extern __shared__ __align__(16) uint8_t sm[];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, q = lane & 3;
  const int wm = warp % WM, wn = warp / WM;
  const int64_t grp = blockIdx.z;
  const float* x = a.x + grp * a.x_group;
  const uint16_t* w = a.w + grp * a.w_group;
  float* y = a.y + grp * a.y_group;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * S::kBM, n0 = static_cast<int64_t>(blockIdx.y) * S::kBN;
  const int nc = a.chunks, kw = a.kw;

  auto issue = [&](int c, int st) {
    uint8_t* base = sm + st * S::kStageBytes;
#pragma unroll
    for (int i = 0; i < S::kBM * 4 / S::kThreads; ++i) {  // weights: kBM columns x 4 units of 8 bf16
      const int u = tid + S::kThreads * i, col = u >> 2, p = u & 3;
      const int64_t k = static_cast<int64_t>(c) * kChunk + 8 * p, gc = m0 + col;
      const bool v = gc < a.out && k < a.in;
      cp_async16(base + col * (kChunk * 2) + p * 16, v ? w + gc * a.in + k : w, v);
    }
#pragma unroll
    for (int i = 0; i < S::kBN * 8 / S::kThreads; ++i) {  // rows: kBN rows x 8 units of 4 floats
      const int u = tid + S::kThreads * i, row = u >> 3, p = u & 7;
      const int64_t k = static_cast<int64_t>(c) * kChunk + 4 * p, gr = n0 + row;
      const bool v = gr < a.rows && k < a.in;
      cp_async16(base + S::kWBytes + row * (kXStride * 4) + p * 16, v ? x + gr * a.in + k : x, v);
    }
  };

#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < nc) issue(st, st);
    cp_async_commit();
  }
  float acc[MI][NI][4], tot[MI][NI][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = tot[i][j][e] = 0.f;
  int slice = 0, bound = slice_begin(1, nc, kw);
  for (int c = 0; c < nc; ++c) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // chunk c landed for everyone; stage (c - 1) % kStages is free
    if (c + kStages - 1 < nc) issue(c + kStages - 1, (c + kStages - 1) % kStages);
    cp_async_commit();
    const uint8_t* base = sm + (c % kStages) * S::kStageBytes;
    uint4 wa[MI], wb[MI], bx[NI];
#pragma unroll
    for (int i = 0; i < MI; ++i) {
      const uint8_t* p = base + (wm * MI * 16 + i * 16 + g) * (kChunk * 2) + q * 16;
      wa[i] = *reinterpret_cast<const uint4*>(p);
      wb[i] = *reinterpret_cast<const uint4*>(p + 8 * (kChunk * 2));
    }
#pragma unroll
    for (int j = 0; j < NI; ++j) {
      const float* p = reinterpret_cast<const float*>(base + S::kWBytes + (wn * NI * 8 + j * 8 + g) * (kXStride * 4)) + 8 * q;
      const float4 f0 = *reinterpret_cast<const float4*>(p), f1 = *reinterpret_cast<const float4*>(p + 4);
      bx[j] = make_uint4(pack_bf16x2(f0.x, f0.y), pack_bf16x2(f0.z, f0.w), pack_bf16x2(f1.x, f1.y), pack_bf16x2(f1.z, f1.w));
    }
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NI; ++j) chunk_mma(wa[i], wb[i], bx[j], acc[i][j]);
    if (c + 1 == bound) {  // end of slice `slice`: fold into tot in slice order
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            tot[i][j][e] = slice == 0 ? acc[i][j][e] : __fadd_rn(tot[i][j][e], acc[i][j][e]);
            acc[i][j][e] = 0.f;
          }
      ++slice;
      bound = slice_begin(slice + 1, nc, kw);
    }
  }
  cp_async_wait<0>();
#pragma unroll
  for (int i = 0; i < MI; ++i) {
    const int64_t col = m0 + wm * MI * 16 + i * 16 + g;
#pragma unroll
    for (int j = 0; j < NI; ++j) {
      const int64_t row = n0 + wn * NI * 8 + j * 8 + 2 * q;
      if (row < a.rows) {
        if (col < a.out) emit<kRound>(y, row, a.y_row, col, tot[i][j][0]);
        if (col + 8 < a.out) emit<kRound>(y, row, a.y_row, col + 8, tot[i][j][2]);
      }
      if (row + 1 < a.rows) {
        if (col < a.out) emit<kRound>(y, row + 1, a.y_row, col, tot[i][j][1]);
        if (col + 8 < a.out) emit<kRound>(y, row + 1, a.y_row, col + 8, tot[i][j][3]);
      }
    }
  }
}

template <bool kRound, int WM, int WN, int MI, int NI>
cudaError_t launch_tile(const Bf16Args& a, int64_t G, cudaStream_t s) {
  using S = TileShape<WM, WN, MI, NI>;
  static const cudaError_t e = cudaFuncSetAttribute(bf16_tile_kernel<kRound, WM, WN, MI, NI>,
                                                    cudaFuncAttributeMaxDynamicSharedMemorySize, S::kSmem);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>((a.out + S::kBM - 1) / S::kBM), static_cast<unsigned>((a.rows + S::kBN - 1) / S::kBN),
                  static_cast<unsigned>(G));
  bf16_tile_kernel<kRound, WM, WN, MI, NI><<<grid, S::kThreads, S::kSmem, s>>>(a);
  return cudaGetLastError();
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

int smem_limit() {
  static const int n = [] {
    int dev = 0, v = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    return v > 0 ? v : 48 * 1024;
  }();
  return n;
}

template <bool kRound>
cudaError_t opt_in_smem() {
  static const cudaError_t e =
      cudaFuncSetAttribute(bf16_rows_kernel<kRound>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_limit());
  return e;
}

// G groups: x float [G, rows, in], weights bf16 [G * out, in], y[r * y_row + g * out + n].
template <bool kRound>
cudaError_t launch(const float* x, int64_t rows, const uint16_t* w, int64_t out, int64_t in, int64_t G, float* y,
                   int64_t y_row, cudaStream_t s) {
  if (rows < 0 || G < 1 || in % 8 || !aligned16(x) || !aligned16(w) || in >= (int64_t{1} << 35))
    return cudaErrorInvalidValue;
  if (rows == 0 || out == 0) return cudaSuccess;
  if (const cudaError_t e = opt_in_smem<kRound>(); e != cudaSuccess) return e;
  Bf16Args a{x, w, y, rows * in, out * in, y_row, out, rows, out, in, 0, 0};
  a.chunks = static_cast<int>((in + kChunk - 1) / kChunk);
  a.kw = bf16_slices(out, a.chunks);
  if (rows <= (g_row_kernel_max > 0 ? g_row_kernel_max : G > 1 ? kGroupedRowKernelMax : kRowKernelMax)) {
    const int umax = (a.chunks + a.kw - 1) / a.kw;
    const int stride = umax * kChunk + (umax % 2 == 0 ? kChunk : 0);
    int rt = static_cast<int>(std::min<int64_t>(rows, kPassRows));
    auto bytes = [&] { return sizeof(float4) * a.kw * (32 + kRing * 64) + size_t(2) * a.kw * rt * stride; };
    while (rt > 1 && bytes() > size_t(smem_limit())) rt /= 2;
    if (bytes() > size_t(smem_limit())) return cudaErrorInvalidValue;
    const dim3 grid(static_cast<unsigned>((out + 15) / 16), static_cast<unsigned>(G));
    bf16_rows_kernel<kRound><<<grid, a.kw * 32, bytes(), s>>>(a, rt, stride);
    return cudaGetLastError();
  }
  return launch_tile<kRound, 4, 2, 2, 4>(a, G, s);
}

}  // namespace

void set_bf16_tile_rows(int64_t rows) { g_row_kernel_max = rows; }

cudaError_t bf16_linear(const float* x, int64_t rows, const Bf16View& W, float* y, cudaStream_t s) {
  if (W.exl3) return exl3_linear(x, rows, *W.exl3, y, Exl3Out::bf16, s);  // a pack's linear
  return launch<true>(x, rows, W.w, W.out, W.in, 1, y, W.out, s);
}

cudaError_t bf16_linear_f32(const float* x, int64_t rows, const Bf16View& W, float* y, cudaStream_t s) {
  if (W.exl3) return cudaErrorInvalidValue;
  return launch<false>(x, rows, W.w, W.out, W.in, 1, y, W.out, s);
}

cudaError_t bf16_grouped_linear(const float* x, int64_t rows, const Bf16View& W, int64_t groups, float* y,
                                cudaStream_t s) {
  if (W.exl3 || groups < 1 || W.out % groups) return cudaErrorInvalidValue;
  return launch<true>(x, rows, W.w, W.out / groups, W.in, groups, y, W.out, s);
}

}  // namespace dsv4::cuda
