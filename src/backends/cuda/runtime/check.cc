// Formatting of CUDA errors for launch_status / cuda_status.
#include "backends/cuda/runtime/check.h"

namespace dsv4::cuda {
namespace {

StatusCode code_of(cudaError_t err) {
  switch (err) {
    case cudaErrorInvalidValue: return StatusCode::invalid_argument;
    case cudaErrorMemoryAllocation: return StatusCode::resource_exhausted;
    default: return StatusCode::internal;
  }
}

}  // namespace

Status launch_status(cudaError_t err, std::string_view kernel, std::string_view shape) {
  if (err == cudaSuccess) return ok_status();
  return error(code_of(err), "{} {}: {} ({})", kernel, shape, cudaGetErrorString(err), cudaGetErrorName(err));
}

std::string shape_text(std::initializer_list<std::pair<std::string_view, int64_t>> dims) {
  std::string s = "[";
  bool first = true;
  for (const auto& [name, value] : dims) {
    if (!first) s += ", ";
    first = false;
    s += fmt::format("{}={}", name, value);
  }
  return s + "]";
}

Status cuda_status(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) return ok_status();
  return error(code_of(err), "{}: {} ({})", what, cudaGetErrorString(err), cudaGetErrorName(err));
}

}  // namespace dsv4::cuda
