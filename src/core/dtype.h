// Element types of checkpoint tensors and caches, with their safetensors names and sizes.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace dsv4 {

enum class DType : uint8_t {
  f8_e4m3,  // "F8_E4M3": FP8 weights and activations (e4m3fn, no infinities)
  f8_e5m2,  // "F8_E5M2"
  f8_e8m0,  // "F8_E8M0": UE8M0 power-of-two scales; "U8" is read as an alias in scale positions
  i8,       // "I8": two packed FP4 e2m1 codes per byte, even element in the low nibble
  u8,       // "U8"
  i16,      // "I16": EXL3 trellis words
  bf16,     // "BF16"
  f16,      // "F16"
  f32,      // "F32"
  i32,      // "I32"
  i64,      // "I64"
};

// Bytes per stored element (an I8 element holds two FP4 values).
constexpr int64_t dtype_size(DType t) {
  switch (t) {
    case DType::f8_e4m3: case DType::f8_e5m2: case DType::f8_e8m0: case DType::i8: case DType::u8:
      return 1;
    case DType::i16: case DType::bf16: case DType::f16: return 2;
    case DType::f32: case DType::i32: return 4;
    case DType::i64: return 8;
  }
  return 0;
}

// The safetensors dtype string ("F8_E4M3", "BF16", ...).
std::string_view dtype_name(DType t);
// Parses a safetensors dtype string; nullopt when unknown.
std::optional<DType> dtype_from_name(std::string_view name);

}  // namespace dsv4
