// Tensor-core instruction rates and the FP8 MMA's chunk sums (docs/perf.md "CUDA linears", docs/numerics.md
// "The CUDA forward on the gate"): (1) 2,048 x 64 x 64 random 32-wide e4m3 chunks (every finite code; then
// exponents 2^-3 .. 2^4) summed by mma.sync m16n8k32 e4m3 from zero and by two chained f16 m16n8k16 MMAs, against the
// exact sum (double) and an fp32 left-to-right sum: equal counts and the largest error over the largest product;
// (2) FLOP/s of mma.sync f16 m16n8k16, mma.sync e4m3 m16n8k32 and wgmma m64n256k32 e4m3 (A and B from shared
// memory) issued back to back on every SM (FLOPs = 2 m n k per instruction); (3) the same chunks summed by
// mma.sync with the products in the linears' k slots, by wgmma m64n64k32 e4m3 from zero, and by two chained
// wgmma m64n64k16 f16, each compared bit for bit with its mma.sync form. sm_90a only.
#include <cuda_fp8.h>
#include <cuda_fp16.h>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <vector>
#include <random>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA %s at %d\n", cudaGetErrorString(e), __LINE__); exit(1);} } while (0)

__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, const float (&c)[4]) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1),
        "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
// d = A B, m16n8k32, e4m3 inputs, f32 from zero.
__device__ __forceinline__ void mma_e4m3(float (&d)[4], const uint32_t (&a)[4], uint2 b) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y),
        "f"(0.f));
}
__device__ __forceinline__ uint64_t desc(const void* smem, uint32_t lbo, uint32_t sbo) {
  uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }

// A: [64][32] e4m3 row-major (k contiguous); B: [N][32] e4m3 (k contiguous per column). Out: [64][N] float.
// mma.sync: warp w does rows 16w..16w+15, all n-blocks.
// kLowp: the k of each MMA slot as the linears place them (slots 4q .. 4q+3 <- k 8q .. 8q+3, slots 16+4q ..
// <- k 8q+4 .. 8q+7) instead of slot s <- k s: the same 32 products in other slots.
template <bool kLowp = false>
__global__ void k_mma_sync(const uint8_t* A, const uint8_t* B, int N, float* out) {
  int w = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const uint8_t* Aw = A + (size_t)blockIdx.x * 64 * 32 + 16 * w * 32;
  const uint8_t* Bb = B + (size_t)blockIdx.x * N * 32;
  const int lo = kLowp ? 8 * q : 4 * q, hi = kLowp ? 8 * q + 4 : 16 + 4 * q;
  uint32_t a[4];
  a[0] = *(const uint32_t*)(Aw + g * 32 + lo); a[1] = *(const uint32_t*)(Aw + (g + 8) * 32 + lo);
  a[2] = *(const uint32_t*)(Aw + g * 32 + hi); a[3] = *(const uint32_t*)(Aw + (g + 8) * 32 + hi);
  float* o = out + (size_t)blockIdx.x * 64 * N;
  for (int nb = 0; nb < N / 8; ++nb) {
    uint32_t b0 = *(const uint32_t*)(Bb + (nb * 8 + g) * 32 + lo), b1 = *(const uint32_t*)(Bb + (nb * 8 + g) * 32 + hi);
    float d[4]; mma_e4m3(d, a, make_uint2(b0, b1));
    int r = 16 * w + g, c = nb * 8 + 2 * q;
    o[r * N + c] = d[0]; o[r * N + c + 1] = d[1]; o[(r + 8) * N + c] = d[2]; o[(r + 8) * N + c + 1] = d[3];
  }
}
// A warpgroup's m64n64 f32 accumulators to o [64][64]: warp w, lane 4 g + q holds d[4 j + e] = D[16 w + g +
// 8 (e >> 1)][8 j + 2 q + (e & 1)].
__device__ __forceinline__ void store_wg64(const float (&d)[32], float* o) {
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  for (int j = 0; j < 8; ++j) {
    const int r = 16 * w + g, c = 8 * j + 2 * q;
    o[r * 64 + c] = d[4 * j], o[r * 64 + c + 1] = d[4 * j + 1];
    o[(r + 8) * 64 + c] = d[4 * j + 2], o[(r + 8) * 64 + c + 1] = d[4 * j + 3];
  }
}

// wgmma m64n64k32 e4m3 from zero (scale-d false), one warpgroup per trial: A [64][32] and B [64][32]
// (k contiguous) staged in a K-major layout without swizzle, core matrices of 8 rows x 16 bytes: row r,
// byte k at (r / 8) sbo + (k / 16) lbo + (r % 8) 16 + k % 16; the descriptors carry dlbo / dsbo (the
// layout's own, or swapped, to show which reading the hardware takes). Out as k_mma_sync's.
__global__ void k_wgmma_n64(const uint8_t* A, const uint8_t* B, float* out, uint32_t lbo, uint32_t sbo, uint32_t dlbo,
                            uint32_t dsbo) {
  __shared__ __align__(128) uint8_t sA[64 * 32], sB[64 * 32];
  const uint8_t* Ab = A + (size_t)blockIdx.x * 64 * 32;
  const uint8_t* Bb = B + (size_t)blockIdx.x * 64 * 32;
  for (int i = threadIdx.x; i < 64 * 32; i += blockDim.x) {
    const int r = i / 32, k = i % 32, off = (r / 8) * sbo + (k / 16) * lbo + (r % 8) * 16 + (k % 16);
    sA[off] = Ab[i], sB[off] = Bb[i];
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const uint64_t da = desc(sA, dlbo, dsbo), db = desc(sB, dlbo, dsbo);
  float d[32];
  wg_fence();
#define W8(b) "=f"(d[b]), "=f"(d[b+1]), "=f"(d[b+2]), "=f"(d[b+3]), "=f"(d[b+4]), "=f"(d[b+5]), "=f"(d[b+6]), "=f"(d[b+7])
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31},"
      " %32, %33, p, 1, 1;\n}\n"
      : W8(0), W8(8), W8(16), W8(24)
      : "l"(da), "l"(db), "r"(0));
#undef W8
  wg_commit(); wg_wait0();
  store_wg64(d, out + (size_t)blockIdx.x * 64 * 64);
}
// f16 pair: MMA0 k 0..15 then MMA1 k 16..31 accumulating (natural k order)
__device__ __forceinline__ uint32_t cvt2(uint16_t two) {
  __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(two, __NV_E4M3); return (uint32_t)h.x | ((uint32_t)h.y << 16);
}
// The f16 pair on wgmma: m64n64k16 f16 (values of the e4m3 codes, exact) over k 0..15 from zero, then
// k 16..31 accumulating; operands K-major, no swizzle, lbo 128, sbo 256 (the layout k_wgmma_n64 reads).
__global__ void k_wgmma_f16pair(const uint8_t* A, const uint8_t* B, float* out) {
  __shared__ __align__(128) __half sA[2][64 * 16], sB[2][64 * 16];
  const uint8_t* Ab = A + (size_t)blockIdx.x * 64 * 32;
  const uint8_t* Bb = B + (size_t)blockIdx.x * 64 * 32;
  for (int i = threadIdx.x; i < 64 * 32; i += blockDim.x) {
    const int r = i / 32, k = i % 32, h = k / 16, kb = 2 * (k % 16);
    const int off = ((r / 8) * 256 + (kb / 16) * 128 + (r % 8) * 16 + (kb % 16)) / 2;
    __half_raw ha, hb;
    ha.x = __nv_cvt_fp8_to_halfraw(Ab[i], __NV_E4M3).x, hb.x = __nv_cvt_fp8_to_halfraw(Bb[i], __NV_E4M3).x;
    sA[h][off] = ha, sB[h][off] = hb;
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  float d[32];
  for (int i = 0; i < 32; ++i) d[i] = 0.f;
  wg_fence();
#define W8(b) "+f"(d[b]), "+f"(d[b+1]), "+f"(d[b+2]), "+f"(d[b+3]), "+f"(d[b+4]), "+f"(d[b+5]), "+f"(d[b+6]), "+f"(d[b+7])
  for (int h = 0; h < 2; ++h) {
    const uint64_t da = desc(sA[h], 128, 256), db = desc(sB[h], 128, 256);
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31},"
        " %32, %33, p, 1, 1, 0, 0;\n}\n"
        : W8(0), W8(8), W8(16), W8(24)
        : "l"(da), "l"(db), "r"(h));
    wg_commit(); wg_wait0();
  }
#undef W8
  store_wg64(d, out + (size_t)blockIdx.x * 64 * 64);
}
__global__ void k_f16pair(const uint8_t* A, const uint8_t* B, int N, float* out) {
  int w = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const uint8_t* Aw = A + (size_t)blockIdx.x * 64 * 32 + 16 * w * 32;
  const uint8_t* Bb = B + (size_t)blockIdx.x * N * 32;
  float* o = out + (size_t)blockIdx.x * 64 * N;
  uint32_t a0[4], a1[4];
  for (int h = 0; h < 2; ++h) {
    uint32_t* a = h ? a1 : a0; int k0 = 16 * h;
    a[0] = cvt2(*(const uint16_t*)(Aw + g * 32 + k0 + 2 * q)); a[1] = cvt2(*(const uint16_t*)(Aw + (g + 8) * 32 + k0 + 2 * q));
    a[2] = cvt2(*(const uint16_t*)(Aw + g * 32 + k0 + 8 + 2 * q)); a[3] = cvt2(*(const uint16_t*)(Aw + (g + 8) * 32 + k0 + 8 + 2 * q));
  }
  for (int nb = 0; nb < N / 8; ++nb) {
    const uint8_t* bc = Bb + (nb * 8 + g) * 32;
    float z[4] = {0, 0, 0, 0}, t[4], d[4];
    mma_f16(t, a0, cvt2(*(const uint16_t*)(bc + 2 * q)), cvt2(*(const uint16_t*)(bc + 8 + 2 * q)), z);
    mma_f16(d, a1, cvt2(*(const uint16_t*)(bc + 16 + 2 * q)), cvt2(*(const uint16_t*)(bc + 24 + 2 * q)), t);
    int r = 16 * w + g, c = nb * 8 + 2 * q;
    o[r * N + c] = d[0]; o[r * N + c + 1] = d[1]; o[(r + 8) * N + c] = d[2]; o[(r + 8) * N + c + 1] = d[3];
  }
}

// ---- throughput ----
__global__ void t_mma_e4m3(int iters, float* sink) {
  uint32_t a[4] = {0x38383838u ^ threadIdx.x, 0x38383838u, 0x30303030u, 0x38383838u};
  uint32_t b0 = 0x38383838u, b1 = 0x30383038u;
  float acc[8][4] = {};
  for (int i = 0; i < iters; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
          : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
  float s = 0; for (int j = 0; j < 8; ++j) s += acc[j][0] + acc[j][1] + acc[j][2] + acc[j][3];
  if (s == 123.f) sink[0] = s;
}
__global__ void t_mma_f16(int iters, float* sink) {
  uint32_t a[4] = {0x3c003c00u ^ threadIdx.x, 0x3c003c00u, 0x3c003c00u, 0x3c003c00u};
  float acc[8][4] = {};
  for (int i = 0; i < iters; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) mma_f16(acc[j], a, 0x3c003c00u, 0x3c003c00u, acc[j]);
  float s = 0; for (int j = 0; j < 8; ++j) s += acc[j][0] + acc[j][1] + acc[j][2] + acc[j][3];
  if (s == 123.f) sink[0] = s;
}
// wgmma m64n256k32, A and B from smem (no swizzle), 2 warpgroups per CTA.
__global__ void t_wgmma(int iters, float* sink) {
  __shared__ __align__(1024) uint8_t sA[2][64 * 32], sB[256 * 32];
  for (int i = threadIdx.x; i < 256 * 32; i += blockDim.x) sB[i] = 0x30;
  for (int i = threadIdx.x; i < 2 * 64 * 32; i += blockDim.x) (&sA[0][0])[i] = 0x30;
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  int wg = threadIdx.x / 128;
  uint64_t da = desc(sA[wg], 128, 256), db = desc(sB, 128, 256);
  float d[128];
  for (int i = 0; i < 128; ++i) d[i] = 0.f;
  for (int it = 0; it < iters; ++it) {
    wg_fence();
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#define R8(b) "+f"(d[b]), "+f"(d[b+1]), "+f"(d[b+2]), "+f"(d[b+3]), "+f"(d[b+4]), "+f"(d[b+5]), "+f"(d[b+6]), "+f"(d[b+7])
      asm volatile("{\n"
          "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 {"
          "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
          "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
          "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"
          "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127},"
          " %128, %129, 1, 1, 1;\n}\n"
          : R8(0), R8(8), R8(16), R8(24), R8(32), R8(40), R8(48), R8(56), R8(64), R8(72), R8(80), R8(88), R8(96), R8(104), R8(112), R8(120)
          : "l"(da), "l"(db));
    }
    wg_commit(); wg_wait0();
  }
  float s = 0; for (int i = 0; i < 128; ++i) s += d[i];
  if (s == 123.f) sink[0] = s;
}

static uint8_t rnd_e4m3(std::mt19937& r, int mode) {
  for (;;) {
    uint8_t v = r() & 0xFF;
    if ((v & 0x7F) == 0x7F) continue;
    if (mode == 1) {  // narrower exponent range: exps within 4 of bias
      int e = (v >> 3) & 15; if (e < 4 || e > 11) continue;
    }
    return v;
  }
}
static double e4m3d(uint8_t v) { __nv_fp8_e4m3 x; x.__x = v; return (double)(float)x; }

int main(int argc, char** argv) {
  int T = 2048;  // trials (blocks)
  std::mt19937 rng(12345);
  float* sink; CK(cudaMalloc(&sink, 4));
  for (int mode = 0; mode < 2; ++mode) {
    const int N = 64;
    std::vector<uint8_t> A((size_t)T * 64 * 32), B((size_t)T * N * 32);
    for (auto& v : A) v = rnd_e4m3(rng, mode);
    for (auto& v : B) v = rnd_e4m3(rng, mode);
    uint8_t *dA, *dB; float *o1, *o2;
    size_t no = (size_t)T * 64 * N;
    CK(cudaMalloc(&dA, A.size())); CK(cudaMalloc(&dB, B.size()));
    for (float** p : {&o1, &o2}) CK(cudaMalloc(p, no * 4));
    CK(cudaMemcpy(dA, A.data(), A.size(), cudaMemcpyHostToDevice)); CK(cudaMemcpy(dB, B.data(), B.size(), cudaMemcpyHostToDevice));
    k_mma_sync<false><<<T, 128>>>(dA, dB, N, o1);
    k_f16pair<<<T, 128>>>(dA, dB, N, o2);
    CK(cudaDeviceSynchronize());
    std::vector<float> h1(no), h2(no);
    CK(cudaMemcpy(h1.data(), o1, no * 4, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(h2.data(), o2, no * 4, cudaMemcpyDeviceToHost));
    size_t eq12 = 0, eq1seq = 0, eq1rn = 0, eq2seq = 0;
    double maxrel1 = 0, maxrel2 = 0, maxrelseq = 0, maxulp1 = 0;
    for (int t = 0; t < T; ++t) for (int r = 0; r < 64; ++r) for (int c = 0; c < N; ++c) {
      size_t i = ((size_t)t * 64 + r) * N + c;
      double ex = 0, sa = 0, pmax = 0; float seq = 0.f;
      for (int k = 0; k < 32; ++k) {
        double p = e4m3d(A[((size_t)t * 64 + r) * 32 + k]) * e4m3d(B[((size_t)t * N + c) * 32 + k]);
        ex += p; sa += fabs(p); pmax = fmax(pmax, fabs(p)); seq = seq + (float)p;
      }
      eq12 += memcmp(&h1[i], &h2[i], 4) == 0;
      eq1seq += h1[i] == seq; eq2seq += h2[i] == seq; eq1rn += h1[i] == (float)ex;
      if (sa > 0) {
        maxrel1 = fmax(maxrel1, fabs(h1[i] - ex) / pmax); maxrel2 = fmax(maxrel2, fabs(h2[i] - ex) / pmax);
        maxrelseq = fmax(maxrelseq, fabs(seq - ex) / pmax);
        if (ex != 0) maxulp1 = fmax(maxulp1, fabs(h1[i] - ex) / (fabs(ex) * 1.1920929e-7));
      }
    }
    printf("mode %d (%s exponents), %zu outputs:\n", mode, mode ? "narrow" : "full", no);
    printf("  mma.sync e4m3 == f16 pair: %zu; == fp32 sequential: %zu; == round(exact): %zu; f16 pair == fp32 seq: %zu\n", eq12, eq1seq, eq1rn, eq2seq);
    printf("  max |err|/max|p|: e4m3 mma %.3g (2^%.1f), f16 pair %.3g, fp32 seq %.3g; e4m3 max err in fp32 ulps of result %.3g\n",
           maxrel1, log2(maxrel1 > 0 ? maxrel1 : 1e-30), maxrel2, maxrelseq, maxulp1);
    // A launch's outputs against `want`: equal bit patterns, and the largest error over the largest product
    // from the exact sum on a sample of 1 in 97.
    auto fetch = [&](const float* dev) {
      CK(cudaDeviceSynchronize());
      std::vector<float> h(no);
      CK(cudaMemcpy(h.data(), dev, no * 4, cudaMemcpyDeviceToHost));
      return h;
    };
    struct Cmp { size_t eq = 0; double maxrel = 0; };
    auto compare = [&](const std::vector<float>& got, const std::vector<float>& want) {
      Cmp c;
      for (size_t i = 0; i < no; ++i) {
        c.eq += memcmp(&got[i], &want[i], 4) == 0;
        if (i % 97) continue;
        const size_t t = i / (64 * N), r = (i / N) % 64, col = i % N;
        double ex = 0, pmax = 0;
        for (int k = 0; k < 32; ++k) {
          const double p = e4m3d(A[(t * 64 + r) * 32 + k]) * e4m3d(B[(t * N + col) * 32 + k]);
          ex += p, pmax = fmax(pmax, fabs(p));
        }
        if (pmax > 0) c.maxrel = fmax(c.maxrel, fabs(got[i] - ex) / pmax);
      }
      return c;
    };
    k_mma_sync<true><<<T, 128>>>(dA, dB, N, o2);  // the products in the linears' slots
    const Cmp slots = compare(fetch(o2), h1);
    printf("  mma.sync, k in the linears' slots == k in natural slots, bits: %zu of %zu\n", slots.eq, no);
    // wgmma's chunk sums against mma.sync's, bit for bit, under each layout reading
    struct V { uint32_t lbo, sbo, dlbo, dsbo; };
    for (const V v : {V{128, 256, 128, 256}, V{1024, 128, 1024, 128}}) {
      k_wgmma_n64<<<T, 128>>>(dA, dB, o2, v.lbo, v.sbo, v.dlbo, v.dsbo);
      const Cmp c = compare(fetch(o2), h1);
      printf("  wgmma m64n64k32 (layout lbo %u sbo %u, descriptor lbo %u sbo %u): == mma.sync bits %zu of %zu; "
             "max |err|/max|p| (sample) %.3g\n", v.lbo, v.sbo, v.dlbo, v.dsbo, c.eq, no, c.maxrel);
    }
    // the f16 pair on wgmma against the f16 pair on mma.sync (h2), bit for bit
    k_wgmma_f16pair<<<T, 128>>>(dA, dB, o1);
    const Cmp f16 = compare(fetch(o1), h2);
    printf("  wgmma m64n64k16 f16 pair == mma.sync f16 pair bits %zu of %zu; max |err|/max|p| (sample) %.3g\n", f16.eq,
           no, f16.maxrel);
    for (float* p : {o1, o2}) cudaFree(p); cudaFree(dA); cudaFree(dB);
  }
  // throughput
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  float ms;
  int it = 4096;
  t_mma_e4m3<<<sms * 4, 256>>>(16, sink); cudaEventRecord(e0); t_mma_e4m3<<<sms * 4, 256>>>(it, sink); cudaEventRecord(e1); CK(cudaEventSynchronize(e1));
  cudaEventElapsedTime(&ms, e0, e1);
  printf("mma.sync m16n8k32 e4m3: %.1f TFLOP/s\n", (double)sms * 4 * 8 * it * 8 * 16 * 8 * 32 * 2 / ms / 1e9);
  t_mma_f16<<<sms * 4, 256>>>(16, sink); cudaEventRecord(e0); t_mma_f16<<<sms * 4, 256>>>(it, sink); cudaEventRecord(e1); CK(cudaEventSynchronize(e1));
  cudaEventElapsedTime(&ms, e0, e1);
  printf("mma.sync m16n8k16 f16: %.1f TFLOP/s\n", (double)sms * 4 * 8 * it * 8 * 16 * 8 * 16 * 2 / ms / 1e9);
  it = 2048;
  t_wgmma<<<sms, 256>>>(16, sink); cudaEventRecord(e0); t_wgmma<<<sms, 256>>>(it, sink); cudaEventRecord(e1); CK(cudaEventSynchronize(e1));
  cudaEventElapsedTime(&ms, e0, e1);
  printf("wgmma m64n256k32 e4m3 (2 WG/SM): %.1f TFLOP/s\n", (double)sms * 2 * it * 4 * 64 * 256 * 32 * 2 / ms / 1e9);
  CK(cudaGetLastError());
  return 0;
}
