// Programmatic dependent launch (compute capability 9.0+): a kernel launched by launch_pdl may start
// while the previous kernel of its stream is still running; it must call pdl_wait() before it reads
// anything an earlier kernel writes and before it writes anything an earlier kernel may still read
// (pdl_wait returns once the previous kernel has completed and its memory is visible, so the chain
// stays ordered). pdl_launch_dependents() lets the next such kernel start early. Both are no-ops
// without a programmatic dependency (and on older devices); the arithmetic never changes.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace dsv4::cuda {

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, s>>>(args...) with programmatic stream serialization allowed.
template <typename... Params, typename... Args>
cudaError_t launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                       Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace dsv4::cuda
