// Shape arithmetic with overflow checks and the "[d0, d1]" shape notation.
#include "core/tensor_view.h"

#include <fmt/format.h>

namespace dsv4 {

std::optional<int64_t> checked_numel(std::span<const int64_t> shape) {
  int64_t n = 1;
  bool zero = false;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (d == 0) zero = true;
  }
  if (zero) return 0;  // a zero dimension makes the product 0 whatever the other dims are
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) return std::nullopt;
  }
  return n;
}

std::optional<int64_t> checked_nbytes(DType dtype, std::span<const int64_t> shape) {
  auto n = checked_numel(shape);
  if (!n) return std::nullopt;
  int64_t bytes = 0;
  if (__builtin_mul_overflow(*n, dtype_size(dtype), &bytes)) return std::nullopt;
  return bytes;
}

std::string shape_string(std::span<const int64_t> shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace dsv4
