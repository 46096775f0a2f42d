// CUDA errors as Status values that name the failing kernel and its launch shape.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "core/status.h"

namespace dsv4::cuda {

// ok for cudaSuccess; otherwise internal (invalid_argument for cudaErrorInvalidValue, a launcher's
// refusal of bad sizes; resource_exhausted for cudaErrorMemoryAllocation) with the text
// "fp8_linear [rows=4, out=1280, in=4096]: an illegal memory access was encountered".
Status launch_status(cudaError_t err, std::string_view kernel, std::string_view shape);

// "[rows=4, out=1280, in=4096]" from name/value pairs.
std::string shape_text(std::initializer_list<std::pair<std::string_view, int64_t>> dims);

// Status of a runtime call that is not a kernel launch ("cudaStreamSynchronize after layer 3: ...").
Status cuda_status(cudaError_t err, std::string_view what);

}  // namespace dsv4::cuda

// Returns the launch's Status from the enclosing function when `expr` (a cudaError_t) failed.
#define DSV4_CUDA_LAUNCH(expr, kernel, shape)                                                   \
  do {                                                                                          \
    const cudaError_t dsv4_cuda_err_ = (expr);                                                  \
    if (dsv4_cuda_err_ != cudaSuccess) return ::dsv4::cuda::launch_status(dsv4_cuda_err_, (kernel), (shape)); \
  } while (0)
