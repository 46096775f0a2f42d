// The GPU benchmarks' start: device 0's properties, or the exit code 77 (skipped) without a device.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace dsv4::bench {

// Exits 77 after printing "no CUDA device" when none is visible (a benchmark measures nothing then).
inline cudaDeviceProp bench_device() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no CUDA device\n");
    std::exit(77);
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  return prop;
}

}  // namespace dsv4::bench
