// Reports the CUDA devices this process can see (the smallest piece of the CUDA backend).
#include "backends/cuda/runtime/device_info.h"

#include <cuda_runtime.h>


namespace dsv4::cuda {

std::vector<DeviceInfo> list_devices() {
  std::vector<DeviceInfo> out;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return out;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    out.push_back({i, prop.name, prop.major * 10 + prop.minor, static_cast<int64_t>(prop.totalGlobalMem)});
  }
  return out;
}

}  // namespace dsv4::cuda
