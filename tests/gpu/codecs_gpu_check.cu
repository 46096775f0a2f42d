// GPU check: the inline codecs of src/core, run on the device, against CUDA's own conversions.
//
// Every one of the 2^32 fp32 patterns (NaNs too, except for bf16) goes through
// f32_to_bf16/f16/e4m3/e5m2/e2m1 and the UE8M0 ceil, compared with __float2bfloat16_rn, __float2half_rn,
// __nv_cvt_float_to_fp8 (satfinite e4m3, nosat and satfinite e5m2), __nv_cvt_float_to_fp4 (RN) and
// __nv_cvt_float_to_e8m0 (satfinite, round up; positive normal inputs only, where formats.md §3.6
// says it equals the kernel's bit trick); every code of each decoder against CUDA's decoders.
// Not part of CI (no GPU there). Build and run from the repository root on a CUDA machine:
//   nvcc -O2 -std=c++20 -arch=sm_90a -Isrc -o /tmp/codecs_gpu_check tests/gpu/codecs_gpu_check.cu
//   /tmp/codecs_gpu_check        # exit status 0 when everything matches
// It also prints CUDA's NaN encodings: on an H200 with CUDA 13.0, 0x7FFF (bf16, f16), 0x7F (e4m3,
// e5m2), 0x7 (e2m1), 0xFF (e8m0); src/core uses these except bf16 (0x7FC0, formats.md §3.5).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp4.h>
#include <cuda_fp8.h>
#include <cstdio>
#include <cstdint>
#include <cmath>
#include "core/bf16.h"
#include "core/fp16.h"
#include "core/fp4.h"
#include "core/fp8.h"
#include "core/ue8m0.h"

enum { BF16, F16, E4M3, E5M2, E5M2SAT, E2M1, E8M0, NCHK };
static const char* kNames[NCHK] = {"bf16", "f16", "e4m3 satfinite", "e5m2 nosat", "e5m2 satfinite", "e2m1", "e8m0 ceil (normal x>0)"};
__device__ unsigned long long g_bad[NCHK];
__device__ unsigned long long g_checked[NCHK];
__device__ unsigned int g_first[NCHK][3][4];

__device__ void cmp(int k, uint32_t u, uint32_t mine, uint32_t hw) {
  if (mine != hw) {
    unsigned long long n = atomicAdd(&g_bad[k], 1ull);
    if (n < 4) { g_first[k][0][n] = u; g_first[k][1][n] = mine; g_first[k][2][n] = hw; }
  }
}

__global__ void check(uint64_t count) {
  unsigned long long local[NCHK] = {};
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < count; i += (uint64_t)gridDim.x * blockDim.x) {
    const uint32_t u = (uint32_t)i;
    const float x = __uint_as_float(u);
    const bool nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
    // bf16 NaN differs by design (0x7FC0 here, 0x7FFF from CUDA); every other NaN code agrees.
    if (!nan) cmp(BF16, u, dsv4::f32_to_bf16(x), __bfloat16_as_ushort(__float2bfloat16_rn(x)));
    cmp(F16, u, dsv4::f32_to_f16(x), __half_as_ushort(__float2half_rn(x)));
    cmp(E4M3, u, dsv4::f32_to_e4m3(x), __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
    cmp(E5M2, u, dsv4::f32_to_e5m2(x), __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E5M2));
    cmp(E5M2SAT, u, dsv4::f32_to_e5m2_sat(x), __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2));
    cmp(E2M1, u, dsv4::f32_to_e2m1(x), __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest));
    for (int k = 0; k < 6; ++k) local[k] += (k != BF16 || !nan);
    if (u >= 0x00800000u && u < 0x7F000000u) {  // positive normal with 2^ceil in range
      cmp(E8M0, u, dsv4::ue8m0_from_log2(dsv4::ceil_log2_f32(x)), __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf));
      local[E8M0]++;
    }
  }
  for (int k = 0; k < NCHK; ++k) atomicAdd(&g_checked[k], local[k]);
}

__global__ void decode(float* out) {
  const int b = threadIdx.x;  // 256 threads
  __half_raw h;
  h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)b, __NV_E4M3);
  out[0 * 256 + b] = __half2float(__half(h));
  out[1 * 256 + b] = dsv4::e4m3_to_f32((uint8_t)b);
  h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)b, __NV_E5M2);
  out[2 * 256 + b] = __half2float(__half(h));
  out[3 * 256 + b] = dsv4::e5m2_to_f32((uint8_t)b);
  h = __nv_cvt_fp4_to_halfraw((__nv_fp4_storage_t)(b & 15), __NV_E2M1);
  out[4 * 256 + b] = __half2float(__half(h));
  out[5 * 256 + b] = dsv4::e2m1_to_f32((uint8_t)b);
  __nv_bfloat16_raw r = __nv_cvt_e8m0_to_bf16raw((__nv_fp8_storage_t)b);
  out[6 * 256 + b] = __bfloat162float(__nv_bfloat16(r));
  out[7 * 256 + b] = dsv4::ue8m0_to_f32((uint8_t)b);
}

__global__ void nan_outputs(uint32_t* out) {
  const float x = __uint_as_float(threadIdx.x == 0 ? 0x7FC00000u : 0xFF800001u);
  const int o = threadIdx.x * 6;
  out[o + 0] = __bfloat16_as_ushort(__float2bfloat16_rn(x));
  out[o + 1] = __half_as_ushort(__float2half_rn(x));
  out[o + 2] = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
  out[o + 3] = __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E5M2);
  out[o + 4] = __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest);
  out[o + 5] = __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf);
}

int main() {
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  cudaEventRecord(a);
  check<<<132 * 16, 256>>>(1ull << 32);
  cudaEventRecord(b);
  if (cudaDeviceSynchronize() != cudaSuccess) { printf("kernel failed: %s\n", cudaGetErrorString(cudaGetLastError())); return 1; }
  float ms; cudaEventElapsedTime(&ms, a, b);
  unsigned long long bad[NCHK], checked[NCHK]; unsigned int first[NCHK][3][4];
  cudaMemcpyFromSymbol(bad, g_bad, sizeof bad);
  cudaMemcpyFromSymbol(checked, g_checked, sizeof checked);
  cudaMemcpyFromSymbol(first, g_first, sizeof first);
  printf("all 2^32 fp32 patterns (NaN inputs too, except for bf16); %.1f ms\n", ms);
  int rc = 0;
  for (int k = 0; k < NCHK; ++k) {
    printf("%-24s checked %llu  mismatches %llu\n", kNames[k], checked[k], bad[k]);
    for (int n = 0; n < 4 && n < (int)bad[k]; ++n) printf("    x=0x%08x mine=0x%x hw=0x%x\n", first[k][0][n], first[k][1][n], first[k][2][n]);
    if (bad[k]) rc = 1;
  }
  float* d; cudaMalloc(&d, 8 * 256 * 4); decode<<<1, 256>>>(d);
  float h[8 * 256]; cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  const char* dn[4] = {"e4m3", "e5m2", "e2m1", "e8m0"};
  for (int f = 0; f < 4; ++f) {
    int bad_dec = 0;
    for (int i = 0; i < (f == 2 ? 16 : 256); ++i) {
      float hw = h[(2 * f) * 256 + i], mine = h[(2 * f + 1) * 256 + i];
      bool same = (std::isnan(hw) && std::isnan(mine)) || (hw == mine && std::signbit(hw) == std::signbit(mine));
      if (!same) { if (bad_dec < 4) printf("    decode %s byte 0x%02x mine=%a hw=%a\n", dn[f], i, mine, hw); ++bad_dec; }
    }
    printf("decode %-4s every code: mismatches %d\n", dn[f], bad_dec);
    if (bad_dec) rc = 1;
  }
  uint32_t* dn2; cudaMalloc(&dn2, 12 * 4); nan_outputs<<<1, 2>>>(dn2);
  uint32_t nn[12]; cudaMemcpy(nn, dn2, sizeof nn, cudaMemcpyDeviceToHost);
  for (int t = 0; t < 2; ++t)
    printf("hw NaN %s -> bf16 0x%x f16 0x%x e4m3 0x%x e5m2 0x%x e2m1 0x%x e8m0 0x%x\n", t ? "0xFF800001" : "0x7FC00000",
           nn[t*6], nn[t*6+1], nn[t*6+2], nn[t*6+3], nn[t*6+4], nn[t*6+5]);
  return rc;
}
