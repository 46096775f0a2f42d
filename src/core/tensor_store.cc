// MemoryTensors: tensors held in memory behind the TensorStore interface.
#include "core/tensor_store.h"

namespace dsv4 {

Status MemoryTensors::add(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
  const std::optional<int64_t> want = checked_nbytes(dtype, shape);
  if (!want || *want != static_cast<int64_t>(bytes.size()))
    return error(StatusCode::invalid_argument, "{}: tensor '{}' {} {}: {} bytes given", name_, name, dtype_name(dtype),
                 shape_string(shape), bytes.size());
  if (tensors_.count(name)) return error(StatusCode::invalid_argument, "{}: tensor '{}' added twice", name_, name);
  total_ += static_cast<int64_t>(bytes.size());
  tensors_.emplace(std::move(name), Entry{dtype, std::move(shape), std::move(bytes)});
  return ok_status();
}

StatusOr<TensorView> MemoryTensors::tensor(std::string_view name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) return error(StatusCode::not_found, "{}: no tensor '{}'", name_, name);
  const Entry& e = it->second;
  return TensorView{e.bytes.data(), e.dtype, e.shape, static_cast<int64_t>(e.bytes.size())};
}

std::vector<std::string> MemoryTensors::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [n, e] : tensors_) out.push_back(n);
  return out;
}

}  // namespace dsv4
