// Tensor-core building blocks of the attention kernels (the sparse attention, attn_sparse_tc.cu; the ViT's,
// vision/vision_attention.cu): bf16 mma.m16n8k16 with fp32 accumulation, the ldmatrix loads of its fragments
// from shared memory and the cp.async copies that fill it.
// Fragment layout (PTX ISA, m16n8k16 .bf16): lane l, g = l / 4, c = l % 4;
//   A (16 x 16, row-major): a0 = (g, 2c..2c+1), a1 = (g+8, 2c..), a2 = (g, 2c+8..), a3 = (g+8, 2c+8..);
//   B (16 x 8, "col": column n contiguous in k): b0 = (k 2c..2c+1, n g), b1 = (k 2c+8.., n g);
//   C (16 x 8, fp32): c0, c1 = (g, 2c..2c+1), c2, c3 = (g+8, 2c..2c+1).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda::attn {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// d += A B (bf16 inputs, fp32 accumulation).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();
#endif
}

// Four 8 x 8 bf16 matrices; lanes 8i..8i+7 give the row addresses of matrix i (16-byte rows);
// r[i] = lane l's pair (row l / 4, columns 2(l % 4), +1) of matrix i.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// The same, each matrix transposed: r[i] = lane l's pair (rows 2(l % 4), +1, column l / 4).
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// 16 bytes global -> shared, asynchronous (cp.async.cg: through L2 only); both addresses 16-byte aligned.
__device__ __forceinline__ void cp_async16(uint32_t smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem) : "memory");
}
// 8 bytes global -> shared, asynchronous (cp.async.ca); both addresses 8-byte aligned.
__device__ __forceinline__ void cp_async8(uint32_t smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Barrier of `count` threads on named barrier `id` (1..15; 0 is __syncthreads).
__device__ __forceinline__ void named_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

}  // namespace dsv4::cuda::attn
