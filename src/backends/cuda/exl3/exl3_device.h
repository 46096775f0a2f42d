// An EXL3 linear uploaded to the device, and the checked call of its GEMM.
#pragma once

#include "backends/cuda/runtime/device_buffer.h"
#include "backends/cuda/exl3/exl3_gemm.cuh"
#include "core/status.h"
#include "formats/exl3/linear.h"

namespace dsv4::cuda {

// Owns the device copies of one layer's trellis, suh and svh.
struct Exl3DeviceLinear {
  DeviceBuffer trellis, suh, svh;
  Exl3Weights weights;  // views into the buffers above
};

// Copies `layer` to the current device; resource_exhausted names the layer when memory runs out.
StatusOr<Exl3DeviceLinear> upload(const exl3::Linear& layer);

// exl3_gemm with its error turned into a Status naming the layer and the launch shape.
Status exl3_gemm_checked(const Exl3DeviceLinear& layer, const float* x, int64_t rows, float* y,
                         void* workspace, cudaStream_t stream, std::string_view name);

}  // namespace dsv4::cuda
