// EXL3 GEMM/GEMV: Hadamard input transform, on-the-fly trellis decode with fixed-order K-slices,
// ordered slice reduction plus Hadamard output transform. Row count never changes the arithmetic.
#include <cuda_fp16.h>

#include <algorithm>

#include "backends/cuda/exl3_gemm.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kHad = 128;         // Hadamard block
constexpr int kWarpsPerBlock = 8; // one warp per 16-column tile column: 8 warps = 128 columns
constexpr int kRowGroup = 8;      // rows accumulated in registers at once
constexpr int kTargetBlocks = 528;  // 4 waves of 132 SMs; a constant so the split is shape-only

// In-place unnormalized Walsh–Hadamard transform of 128 floats in shared memory, natural order
// (H[i][j] = (-1)^popcount(i & j)); 128 threads, one element each.
__device__ void hadamard128(float* s) {
  const int t = threadIdx.x;
  for (int len = 1; len < kHad; len <<= 1) {
    __syncthreads();
    const float mine = s[t];
    const float other = s[t ^ len];
    __syncthreads();
    s[t] = (t & len) ? other - mine : mine + other;
  }
  __syncthreads();
}

// u[r, k] = H(x[r]∘suh) per 128-block, unnormalized (the two 1/√128 factors are applied once, as an
// exact 1/128, at the output).
__global__ void exl3_input_transform(const float* __restrict__ x, const uint16_t* __restrict__ suh,
                                     int64_t in, float* __restrict__ u) {
  __shared__ float s[kHad];
  const int64_t r = blockIdx.x;
  const int64_t k = int64_t(blockIdx.y) * kHad + threadIdx.x;
  s[threadIdx.x] = x[r * in + k] * __half2float(__ushort_as_half(suh[k]));
  hadamard128(s);
  u[r * in + k] = s[threadIdx.x];
}

// One codebook value (fp16, rounded exactly as the reference decoder) as float.
__device__ __forceinline__ float codebook_value(int codebook, uint32_t state) {
  if (codebook == 2) {  // mul1: 1024 + byte sum, then one fused fp16 multiply-add
    const uint32_t x = state * 0x83DCD12Du;
    const uint32_t sum = (x & 0xFF) + ((x >> 8) & 0xFF) + ((x >> 16) & 0xFF) + (x >> 24);
    const __half h = __ushort_as_half(static_cast<unsigned short>(0x6400 + sum));
    return __half2float(__hfma(h, __ushort_as_half(0x1EEE), __ushort_as_half(0xC931)));
  }
  uint32_t x = codebook == 1 ? state * 0xCBAC1FEDu : state * 89226354u + 64248484u;
  x = (x & 0x8FFF8FFFu) ^ 0x3B603B60u;
  const __half lo = __ushort_as_half(static_cast<unsigned short>(x & 0xFFFF));
  const __half hi = __ushort_as_half(static_cast<unsigned short>(x >> 16));
  return __half2float(__hadd(lo, hi));
}

// Partial sums of one K-slice: block (column block cb, slice ks); warp w owns tile column
// nt = 8·cb + w; lane l owns stream values 8l..8l+7 of every tile (the mma B-fragment order:
// rows 2(l%4) + {0,1,8,9}, columns l/4 and l/4 + 8). Per output the order is fixed: tiles in
// ascending kt, the lane's 4 rows in j order, then a butterfly over the 4 lanes of a column.
__global__ void exl3_tile_kernel(Exl3Weights w, const float* __restrict__ u, int64_t rows,
                                 int kt_per_split, float* __restrict__ partial) {
  __shared__ uint32_t words[kWarpsPerBlock][64];
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t tiles_n = w.out_features / 16;
  const int64_t tiles_k = w.in_features / 16;
  const int64_t nt = int64_t(blockIdx.x) * kWarpsPerBlock + warp;
  const int64_t kt_begin = int64_t(blockIdx.y) * kt_per_split;
  const int64_t kt_end = std::min<int64_t>(kt_begin + kt_per_split, tiles_k);
  const int bits = w.bits;
  const int n32 = 8 * bits;
  const int total_bits = 256 * bits;
  const uint32_t* trellis32 = reinterpret_cast<const uint32_t*>(w.trellis);
  uint32_t* sw = words[warp];
  const int row_base = 2 * (lane % 4);

  for (int64_t r0 = 0; r0 < rows; r0 += kRowGroup) {
    const int nrows = static_cast<int>(std::min<int64_t>(kRowGroup, rows - r0));
    float acc[kRowGroup][2];
#pragma unroll
    for (int r = 0; r < kRowGroup; ++r) acc[r][0] = acc[r][1] = 0.f;

    for (int64_t kt = kt_begin; kt < kt_end; ++kt) {
      const uint32_t* tile = trellis32 + (kt * tiles_n + nt) * (8 * bits);
      __syncwarp();
      for (int i = lane; i < n32; i += 32) sw[i] = tile[i];
      __syncwarp();
      float value[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int p = 8 * lane + j;
        const int start = ((p + 1) * bits - 16 + total_bits) % total_bits;
        const int i = start >> 5;
        const int o = start & 31;
        const uint64_t window = (uint64_t(sw[i]) << 32) | sw[(i + 1) % n32];
        value[j] = codebook_value(w.codebook, static_cast<uint32_t>(window >> (48 - o)) & 0xFFFFu);
      }
      const int64_t k0 = kt * 16 + row_base;
#pragma unroll
      for (int r = 0; r < kRowGroup; ++r) {
        if (r >= nrows) break;
        const float* ur = u + (r0 + r) * w.in_features + k0;
        const float u0 = ur[0], u1 = ur[1], u8 = ur[8], u9 = ur[9];
        // j: row offset (j&1) + 8·((j>>1)&1), column half j>>2.
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
    for (int r = 0; r < kRowGroup; ++r) {
      if (r >= nrows) break;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float v = acc[r][h];
        v += __shfl_xor_sync(0xFFFFFFFFu, v, 1);
        v += __shfl_xor_sync(0xFFFFFFFFu, v, 2);
        acc[r][h] = v;
      }
      if (lane % 4 == 0) {
        float* out = partial + (int64_t(blockIdx.y) * rows + r0 + r) * w.out_features + nt * 16 + lane / 4;
        out[0] = acc[r][0];
        out[8] = acc[r][1];
      }
    }
  }
}

// y[r, n] = H(Σ_slices partial)[n] · svh[n] / 128, slices summed in index order.
__global__ void exl3_output_transform(const float* __restrict__ partial, int splits, int64_t rows,
                                      const uint16_t* __restrict__ svh, int64_t out, float* __restrict__ y) {
  __shared__ float s[kHad];
  const int64_t r = blockIdx.x;
  const int64_t n = int64_t(blockIdx.y) * kHad + threadIdx.x;
  float v = 0.f;
  for (int ks = 0; ks < splits; ++ks) v += partial[(int64_t(ks) * rows + r) * out + n];
  s[threadIdx.x] = v;
  hadamard128(s);
  y[r * out + n] = s[threadIdx.x] * (1.0f / 128.0f) * __half2float(__ushort_as_half(svh[n]));
}

}  // namespace

int exl3_k_splits(int64_t in_features, int64_t out_features) {
  const int64_t column_blocks = out_features / kHad;
  const int64_t tiles_k = in_features / 16;
  const int64_t want = (kTargetBlocks + column_blocks - 1) / column_blocks;
  const int64_t max_splits = std::max<int64_t>(1, tiles_k / 4);  // at least 4 tiles per slice
  const int64_t splits = std::clamp<int64_t>(want, 1, max_splits);
  // Round so every slice has the same tile count.
  const int64_t per = (tiles_k + splits - 1) / splits;
  return static_cast<int>((tiles_k + per - 1) / per);
}

size_t exl3_workspace_bytes(const Exl3Weights& w, int64_t rows) {
  const int64_t splits = exl3_k_splits(w.in_features, w.out_features);
  return sizeof(float) * static_cast<size_t>(rows * w.in_features + splits * rows * w.out_features);
}

cudaError_t exl3_gemm(const Exl3Weights& w, const float* x, int64_t rows, float* y, void* workspace,
                      cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  if (w.in_features % kHad || w.out_features % kHad || w.bits < 1 || w.bits > 8)
    return cudaErrorInvalidValue;
  const int splits = exl3_k_splits(w.in_features, w.out_features);
  const int64_t tiles_k = w.in_features / 16;
  const int kt_per_split = static_cast<int>((tiles_k + splits - 1) / splits);
  float* u = static_cast<float*>(workspace);
  float* partial = u + rows * w.in_features;
  exl3_input_transform<<<dim3(unsigned(rows), unsigned(w.in_features / kHad)), kHad, 0, stream>>>(
      x, w.suh, w.in_features, u);
  exl3_tile_kernel<<<dim3(unsigned(w.out_features / kHad), unsigned(splits)), 32 * kWarpsPerBlock, 0, stream>>>(
      w, u, rows, kt_per_split, partial);
  exl3_output_transform<<<dim3(unsigned(rows), unsigned(w.out_features / kHad)), kHad, 0, stream>>>(
      partial, splits, rows, w.svh, w.out_features, y);
  return cudaGetLastError();
}

}  // namespace dsv4::cuda
