// TensorView: a non-owning typed window onto bytes (usually a mapped checkpoint), plus shape helpers.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace dsv4 {

// Element count of `shape` (1 for a scalar `[]`); nullopt when a dimension is negative or the
// product overflows int64.
std::optional<int64_t> checked_numel(std::span<const int64_t> shape);
// Bytes of `shape` elements of `dtype`; nullopt on a negative dimension or int64 overflow.
std::optional<int64_t> checked_nbytes(DType dtype, std::span<const int64_t> shape);
// "[d0, d1]" (and "[]" for a scalar): the shape notation of checkpoint tables and errors.
std::string shape_string(std::span<const int64_t> shape);

// Does not own `data`; whoever produced the view (e.g. a SafetensorsFile) must outlive it.
// `data` may be unaligned (EXL3 packs have odd data offsets): read through memcpy or bytes().
// For DType::i8 each stored element is one byte holding two FP4 e2m1 codes, so numel() counts
// bytes, not FP4 values.
struct TensorView {
  const void* data = nullptr;
  DType dtype = DType::u8;
  std::vector<int64_t> shape;
  int64_t nbytes = 0;

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t dim(int64_t i) const { return shape[static_cast<size_t>(i < 0 ? i + rank() : i)]; }
  // Stored elements (product of dims; 1 for a scalar).
  int64_t numel() const;
  const uint8_t* bytes() const { return static_cast<const uint8_t*>(data); }
  std::span<const uint8_t> byte_span() const { return {bytes(), static_cast<size_t>(nbytes)}; }
};

}  // namespace dsv4
