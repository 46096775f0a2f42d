// FP8 -> bf16 dequantization kernel (see dequant.cuh).
#include "backends/cuda/kernels/linear/dequant.cuh"

#include <algorithm>

#include "core/bf16.h"
#include "core/fp8.h"
#include "core/ue8m0.h"

namespace dsv4::cuda {
namespace {

__global__ void fp8_to_bf16_kernel(const uint8_t* codes, const uint8_t* scales, int64_t out, int64_t in, int block,
                                   uint16_t* dst) {
  const int64_t sb = (in + block - 1) / block, n = out * in;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / in, k = i % in;
    const float v = e4m3_to_f32(codes[i]) * ue8m0_to_f32(scales[(r / block) * sb + k / block]);
    dst[i] = f32_to_bf16(v);
  }
}

}  // namespace

cudaError_t fp8_to_bf16(const uint8_t* codes, const uint8_t* scales, int64_t out, int64_t in, int block,
                        uint16_t* dst, cudaStream_t s) {
  if (out * in == 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>((out * in + 255) / 256, 65535);
  fp8_to_bf16_kernel<<<static_cast<unsigned>(blocks), 256, 0, s>>>(codes, scales, out, in, block, dst);
  return cudaGetLastError();
}

}  // namespace dsv4::cuda
