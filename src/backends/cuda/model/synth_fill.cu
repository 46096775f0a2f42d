// Random fills of synthetic weights (see synth_fill.cuh).
#include "backends/cuda/model/synth_fill.cuh"

namespace dsv4::cuda {

namespace {

__device__ inline uint32_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

__global__ void fill_bytes_kernel(uint8_t* p, int64_t n, FillKind kind, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t r = mix(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i));
    uint8_t v = 0;
    if (kind == FillKind::e4m3) v = static_cast<uint8_t>((r & 0x80u) | (0x20u + (r >> 8) % 0x18u));
    else if (kind == FillKind::e2m1x2) v = static_cast<uint8_t>(r);
    else v = static_cast<uint8_t>(120 + (r >> 8) % 2);  // ue8m0
    p[i] = v;
  }
}

__global__ void fill_words_kernel(void* p, int64_t n, FillKind kind, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t r = mix(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i));
    const uint32_t sign = (r & 1u) << 31;
    const uint32_t expo = 120u + (r >> 1) % 3u;
    const uint32_t man = (r >> 8) & 0x7fu;
    if (kind == FillKind::bf16) {
      static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>((sign >> 16) | (expo << 7) | man);
    } else if (kind == FillKind::f32) {
      static_cast<uint32_t*>(p)[i] = sign | (expo << 23) | (man << 16);
    } else {  // f32_one: 1 + small
      static_cast<uint32_t*>(p)[i] = (127u << 23) | (man << 12);
    }
  }
}

}  // namespace

cudaError_t synth_fill(void* p, int64_t bytes, FillKind kind, uint64_t seed, cudaStream_t s) {
  if (bytes <= 0) return cudaSuccess;
  const int threads = 256, blocks = 4096;
  if (kind == FillKind::e4m3 || kind == FillKind::e2m1x2 || kind == FillKind::ue8m0) {
    fill_bytes_kernel<<<blocks, threads, 0, s>>>(static_cast<uint8_t*>(p), bytes, kind, seed);
  } else {
    const int64_t n = kind == FillKind::bf16 ? bytes / 2 : bytes / 4;
    fill_words_kernel<<<blocks, threads, 0, s>>>(p, n, kind, seed);
  }
  return cudaGetLastError();
}

}  // namespace dsv4::cuda
