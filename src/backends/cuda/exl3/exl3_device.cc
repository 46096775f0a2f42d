// Upload of EXL3 layers and the Status-returning GEMM wrapper.
#include "backends/cuda/exl3/exl3_device.h"

namespace dsv4::cuda {
namespace {

StatusOr<DeviceBuffer> copy_to_device(const void* host, size_t bytes, std::string_view what) {
  DeviceBuffer buffer(bytes);
  if (!buffer) return error(StatusCode::resource_exhausted, "cannot allocate {} bytes on the device for {}", bytes, what);
  const cudaError_t err = cudaMemcpy(buffer.get(), host, buffer.bytes(), cudaMemcpyHostToDevice);
  if (err != cudaSuccess) return error(StatusCode::internal, "copying {} to the device: {}", what, cudaGetErrorString(err));
  return buffer;
}

}  // namespace

StatusOr<Exl3DeviceLinear> upload(const exl3::Linear& layer) {
  DSV4_RETURN_IF_ERROR(exl3::validate(layer));
  Exl3DeviceLinear out;
  DSV4_ASSIGN_OR_RETURN(out.trellis, copy_to_device(layer.trellis.bytes(), static_cast<size_t>(layer.trellis.nbytes()),
                                                     layer.name + ".trellis"));
  DSV4_ASSIGN_OR_RETURN(out.suh, copy_to_device(layer.suh.data(), layer.suh.size() * 2, layer.name + ".suh"));
  DSV4_ASSIGN_OR_RETURN(out.svh, copy_to_device(layer.svh.data(), layer.svh.size() * 2, layer.name + ".svh"));
  out.weights = {out.trellis.as<uint16_t>(), out.suh.as<uint16_t>(), out.svh.as<uint16_t>(),
                 layer.in_features, layer.out_features, layer.bits, static_cast<int>(layer.codebook)};
  return out;
}

Status exl3_gemm_checked(const Exl3DeviceLinear& layer, const float* x, int64_t rows, float* y,
                         void* workspace, cudaStream_t stream, std::string_view name) {
  const cudaError_t err = exl3_gemm(layer.weights, x, rows, y, workspace, stream);
  if (err != cudaSuccess)
    return error(StatusCode::internal, "exl3_gemm on '{}' (rows {}, in {}, out {}, bits {}): {}", name, rows,
                 layer.weights.in_features, layer.weights.out_features, layer.weights.bits, cudaGetErrorString(err));
  return ok_status();
}

}  // namespace dsv4::cuda
