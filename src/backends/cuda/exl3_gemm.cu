// EXL3 GEMV/GEMM in one launch: each block rotates its K-slice of the input (Hadamard ∘ suh), decodes
// its trellis tiles on the fly, and the last block of a column block to finish adds the slices in
// index order and applies the output Hadamard ∘ svh. The row count never changes the arithmetic.
#include <cuda_fp16.h>

#include <algorithm>

#include "backends/cuda/exl3_gemm.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kHad = 128;           // Hadamard block
constexpr int kWarps = 8;           // one warp per 16-column tile column: 8 warps = 128 columns
constexpr int kThreads = 32 * kWarps;
constexpr int kMaxRowGroup = 8;     // rows accumulated in registers at once
constexpr int kTargetBlocks = 528;  // 4 waves of 132 SMs; a constant, so the split is shape-only
constexpr int kMaxSliceK = 1024;    // K per slice is bounded so the rotated input fits shared memory

struct Split {
  int splits;          // K-slices
  int had_per_split;   // 128-wide Hadamard blocks per slice
};

__host__ __device__ Split choose_split(int64_t in_features, int64_t out_features) {
  const int64_t column_blocks = out_features / kHad;
  const int64_t had_blocks = in_features / kHad;
  int64_t splits = (kTargetBlocks + column_blocks - 1) / column_blocks;
  splits = splits < 1 ? 1 : (splits > had_blocks ? had_blocks : splits);
  int64_t per = (had_blocks + splits - 1) / splits;
  if (per * kHad > kMaxSliceK) per = kMaxSliceK / kHad;
  return {static_cast<int>((had_blocks + per - 1) / per), static_cast<int>(per)};
}

// Two codebook values (fp16, rounded exactly as the reference decoder: one fp16 rounding each) for
// states a and b, as floats; pairs share the half2 add / fused multiply-add.
template <int CB>
__device__ __forceinline__ float2 codebook_pair(uint32_t a, uint32_t b) {
  if constexpr (CB == 2) {  // mul1: h = 1024 + unsigned byte sum (dp4a), value = fma(h, 0x1EEE, 0xC931)
    const uint32_t ha = __dp4a(a * 0x83DCD12Du, 0x01010101u, 0x6400u);
    const uint32_t hb = __dp4a(b * 0x83DCD12Du, 0x01010101u, 0x6400u);
    const uint32_t packed = __byte_perm(ha, hb, 0x5410);  // low halves of ha, hb
    const __half2 h = *reinterpret_cast<const __half2*>(&packed);
    return __half22float2(__hfma2(h, __half2half2(__ushort_as_half(0x1EEE)), __half2half2(__ushort_as_half(0xC931))));
  } else {  // 3INST / MCG: hash, mask/xor, then the sum of the two halves
    uint32_t xa = CB == 1 ? a * 0xCBAC1FEDu : a * 89226354u + 64248484u;
    uint32_t xb = CB == 1 ? b * 0xCBAC1FEDu : b * 89226354u + 64248484u;
    xa = (xa & 0x8FFF8FFFu) ^ 0x3B603B60u;
    xb = (xb & 0x8FFF8FFFu) ^ 0x3B603B60u;
    const uint32_t lo = __byte_perm(xa, xb, 0x5410);  // (xa.lo, xb.lo)
    const uint32_t hi = __byte_perm(xa, xb, 0x7632);  // (xa.hi, xb.hi)
    return __half22float2(__hadd2(*reinterpret_cast<const __half2*>(&lo), *reinterpret_cast<const __half2*>(&hi)));
  }
}

// 16 bits at compile-time offset O of the big-endian bit string n0 n1 n2.
template <int O>
__device__ __forceinline__ uint32_t bits16(uint32_t n0, uint32_t n1, uint32_t n2) {
  constexpr int word = O / 32, shift = O % 32;
  const uint32_t hi = word == 0 ? n0 : (word == 1 ? n1 : n2);
  const uint32_t lo = word == 0 ? n1 : n2;
  if constexpr (shift <= 16) return (hi << shift) >> 16;
  else return __funnelshift_l(lo, hi, shift) >> 16;
}

// The 8 values of the lane in one tile. The lane's states are the 16-bit windows ending at bits
// (8l+j+1)·K of the circular tile stream: after shifting its 4 words left by o0 (the window start
// inside the first word), value j starts at the compile-time offset j·K.
template <int BITS, int CB>
__device__ __forceinline__ void decode_lane(const uint32_t (&w)[4], int o0, float (&value)[8]) {
  const uint32_t n0 = __funnelshift_l(w[1], w[0], o0);
  const uint32_t n1 = __funnelshift_l(w[2], w[1], o0);
  const uint32_t n2 = __funnelshift_l(w[3], w[2], o0);
  uint32_t st[8];
  st[0] = bits16<0 * BITS>(n0, n1, n2);
  st[1] = bits16<1 * BITS>(n0, n1, n2);
  st[2] = bits16<2 * BITS>(n0, n1, n2);
  st[3] = bits16<3 * BITS>(n0, n1, n2);
  st[4] = bits16<4 * BITS>(n0, n1, n2);
  st[5] = bits16<5 * BITS>(n0, n1, n2);
  st[6] = bits16<6 * BITS>(n0, n1, n2);
  st[7] = bits16<7 * BITS>(n0, n1, n2);
#pragma unroll
  for (int j = 0; j < 8; j += 2) {
    const float2 v = codebook_pair<CB>(st[j], st[j + 1]);
    value[j] = v.x;
    value[j + 1] = v.y;
  }
}

// In-place unnormalized Walsh–Hadamard transform of `count` 128-blocks in shared memory, natural
// order, with all block threads; the pairing (a+b, a−b) matches the CPU butterflies.
__device__ void hadamard_blocks(float* s, int count) {
  const int total = count * kHad;
  for (int len = 1; len < kHad; len <<= 1) {
    __syncthreads();
    for (int i = threadIdx.x; i < total / 2; i += blockDim.x) {
      // i enumerates pairs: block-local index with bit `len` cleared.
      const int block = i / (kHad / 2);
      const int q = i % (kHad / 2);
      const int lo = (q / len) * (2 * len) + (q % len);
      float* base = s + block * kHad;
      const float a = base[lo], b = base[lo + len];
      base[lo] = a + b;
      base[lo + len] = a - b;
    }
  }
  __syncthreads();
}

template <int BITS, int CB, int RG>
__global__ void __launch_bounds__(kThreads) exl3_fused(Exl3Weights w, const float* __restrict__ x, int64_t rows,
                                                       Split split, float* __restrict__ partial,
                                                       unsigned int* __restrict__ tickets, float* __restrict__ y) {
  extern __shared__ float smem[];  // u [RG][slice_k], then the reduction buffer [kHad]
  __shared__ bool is_last;
  constexpr int n32 = 8 * BITS;
  constexpr int total_bits = 256 * BITS;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t in = w.in_features, out = w.out_features;
  const int64_t tiles_n = out / 16;
  const int cb = blockIdx.x;
  const int ks = blockIdx.y;
  const int64_t nt = int64_t(cb) * kWarps + warp;
  const int64_t k_begin = int64_t(ks) * split.had_per_split * kHad;
  const int64_t k_end = std::min<int64_t>(k_begin + int64_t(split.had_per_split) * kHad, in);
  const int slice_k = static_cast<int>(k_end - k_begin);
  const uint32_t* trellis32 = reinterpret_cast<const uint32_t*>(w.trellis);
  float* u = smem;
  float* red = smem + RG * split.had_per_split * kHad;

  // Per lane: where its bit window starts in the tile stream, and its 4 rows.
  const int first_bit = ((8 * lane + 1) * BITS - 16 + total_bits) % total_bits;
  const int first_word = first_bit >> 5;
  const int o0 = first_bit & 31;
  int widx[4];  // the lane's 4 consecutive words of every tile (mod the tile's word count)
#pragma unroll
  for (int i = 0; i < 4; ++i) widx[i] = (first_word + i) % n32;
  const int row_base = 2 * (lane % 4);

  for (int64_t r0 = 0; r0 < rows; r0 += RG) {
    const int nrows = static_cast<int>(std::min<int64_t>(RG, rows - r0));
    // u = H(x ∘ suh) over this slice, unnormalized (1/128 is applied once at the output).
    for (int i = threadIdx.x; i < RG * slice_k; i += kThreads) {
      const int r = i / slice_k, k = i % slice_k;
      u[r * slice_k + k] = r < nrows ? x[(r0 + r) * in + k_begin + k] * __half2float(__ushort_as_half(w.suh[k_begin + k]))
                                     : 0.f;
    }
    hadamard_blocks(u, RG * slice_k / kHad);

    float acc[RG][2];
#pragma unroll
    for (int r = 0; r < RG; ++r) acc[r][0] = acc[r][1] = 0.f;
    const int64_t kt_begin = k_begin / 16, kt_end = k_end / 16;
    uint32_t next[4];
    const uint32_t* tile = trellis32 + (kt_begin * tiles_n + nt) * n32;
#pragma unroll
    for (int i = 0; i < 4; ++i) next[i] = __ldg(tile + widx[i]);
    for (int64_t kt = kt_begin; kt < kt_end; ++kt) {
      uint32_t cur[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) cur[i] = next[i];
      if (kt + 1 < kt_end) {  // the next tile's words load while this one decodes
        tile += tiles_n * n32;
#pragma unroll
        for (int i = 0; i < 4; ++i) next[i] = __ldg(tile + widx[i]);
      }
      float value[8];
      decode_lane<BITS, CB>(cur, o0, value);
      const int k0 = static_cast<int>(kt * 16 - k_begin) + row_base;
#pragma unroll
      for (int r = 0; r < RG; ++r) {
        const float* ur = u + r * slice_k + k0;
        const float u0 = ur[0], u1 = ur[1], u8 = ur[8], u9 = ur[9];
        // Value j sits at row offset (j&1) + 8·((j>>1)&1), column half j>>2.
        acc[r][0] += u0 * value[0];
        acc[r][0] += u1 * value[1];
        acc[r][0] += u8 * value[2];
        acc[r][0] += u9 * value[3];
        acc[r][1] += u0 * value[4];
        acc[r][1] += u1 * value[5];
        acc[r][1] += u8 * value[6];
        acc[r][1] += u9 * value[7];
      }
    }
#pragma unroll
    for (int r = 0; r < RG; ++r) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float v = acc[r][h];
        v += __shfl_xor_sync(0xFFFFFFFFu, v, 1);
        v += __shfl_xor_sync(0xFFFFFFFFu, v, 2);
        if (lane % 4 == 0 && r < nrows)
          partial[(int64_t(ks) * rows + r0 + r) * out + nt * 16 + lane / 4 + 8 * h] = v;
      }
    }
    __syncthreads();  // u is rewritten by the next row group
  }

  // The last slice of this column block to finish reduces all slices in index order.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) is_last = atomicAdd(&tickets[cb], 1u) == static_cast<unsigned>(split.splits - 1);
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  for (int64_t r = 0; r < rows; ++r) {
    if (threadIdx.x < kHad) {
      const int64_t n = int64_t(cb) * kHad + threadIdx.x;
      float v = 0.f;
      for (int s = 0; s < split.splits; ++s) v += __ldcg(partial + (int64_t(s) * rows + r) * out + n);
      red[threadIdx.x] = v;
    }
    hadamard_blocks(red, 1);
    if (threadIdx.x < kHad) {
      const int64_t n = int64_t(cb) * kHad + threadIdx.x;
      y[r * out + n] = red[threadIdx.x] * (1.0f / 128.0f) * __half2float(__ushort_as_half(w.svh[n]));
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) tickets[cb] = 0;  // ready for the next launch (and graph replays)
}

template <int BITS, int CB, int RG>
cudaError_t launch(const Exl3Weights& w, const float* x, int64_t rows, Split split, float* partial,
                   unsigned int* tickets, float* y, cudaStream_t stream) {
  const size_t smem = sizeof(float) * (size_t(RG) * split.had_per_split * kHad + kHad);
  auto kernel = exl3_fused<BITS, CB, RG>;
  if (smem > 48 * 1024) {
    const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (err != cudaSuccess) return err;
  }
  kernel<<<dim3(unsigned(w.out_features / kHad), unsigned(split.splits)), kThreads, smem, stream>>>(
      w, x, rows, split, partial, tickets, y);
  return cudaGetLastError();
}

template <int BITS, int CB>
cudaError_t dispatch_rows(const Exl3Weights& w, const float* x, int64_t rows, Split split, float* partial,
                          unsigned int* tickets, float* y, cudaStream_t stream) {
  // The register row group is a launch detail only: each row's sums are the same for any group.
  // Two groups keep the instantiations (and the build) small.
  if (rows == 1) return launch<BITS, CB, 1>(w, x, rows, split, partial, tickets, y, stream);
  return launch<BITS, CB, kMaxRowGroup>(w, x, rows, split, partial, tickets, y, stream);
}

template <int BITS>
cudaError_t dispatch_codebook(const Exl3Weights& w, const float* x, int64_t rows, Split split, float* partial,
                              unsigned int* tickets, float* y, cudaStream_t stream) {
  switch (w.codebook) {
    case 0: return dispatch_rows<BITS, 0>(w, x, rows, split, partial, tickets, y, stream);
    case 1: return dispatch_rows<BITS, 1>(w, x, rows, split, partial, tickets, y, stream);
    case 2: return dispatch_rows<BITS, 2>(w, x, rows, split, partial, tickets, y, stream);
  }
  return cudaErrorInvalidValue;
}

size_t ticket_bytes(const Exl3Weights& w) {
  return (sizeof(unsigned int) * size_t(w.out_features / kHad) + 255) / 256 * 256;
}

}  // namespace

int exl3_k_splits(int64_t in_features, int64_t out_features) {
  return choose_split(in_features, out_features).splits;
}

size_t exl3_workspace_bytes(const Exl3Weights& w, int64_t rows) {
  const int64_t splits = exl3_k_splits(w.in_features, w.out_features);
  return ticket_bytes(w) + sizeof(float) * static_cast<size_t>(splits * rows * w.out_features);
}

cudaError_t exl3_workspace_init(const Exl3Weights& w, void* workspace, cudaStream_t stream) {
  return cudaMemsetAsync(workspace, 0, ticket_bytes(w), stream);
}

cudaError_t exl3_gemm(const Exl3Weights& w, const float* x, int64_t rows, float* y, void* workspace,
                      cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  if (w.in_features % kHad || w.out_features % kHad || w.bits < 1 || w.bits > 8) return cudaErrorInvalidValue;
  const Split split = choose_split(w.in_features, w.out_features);
  unsigned int* tickets = static_cast<unsigned int*>(workspace);
  float* partial = reinterpret_cast<float*>(static_cast<char*>(workspace) + ticket_bytes(w));
  switch (w.bits) {
    case 1: return dispatch_codebook<1>(w, x, rows, split, partial, tickets, y, stream);
    case 2: return dispatch_codebook<2>(w, x, rows, split, partial, tickets, y, stream);
    case 3: return dispatch_codebook<3>(w, x, rows, split, partial, tickets, y, stream);
    case 4: return dispatch_codebook<4>(w, x, rows, split, partial, tickets, y, stream);
    case 5: return dispatch_codebook<5>(w, x, rows, split, partial, tickets, y, stream);
    case 6: return dispatch_codebook<6>(w, x, rows, split, partial, tickets, y, stream);
    case 7: return dispatch_codebook<7>(w, x, rows, split, partial, tickets, y, stream);
    case 8: return dispatch_codebook<8>(w, x, rows, split, partial, tickets, y, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace dsv4::cuda
