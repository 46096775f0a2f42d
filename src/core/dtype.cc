// Safetensors dtype strings.
#include "core/dtype.h"

#include <array>
#include <utility>

namespace dsv4 {
namespace {
constexpr std::array<std::pair<DType, std::string_view>, 11> kNames = {{
    {DType::f8_e4m3, "F8_E4M3"}, {DType::f8_e5m2, "F8_E5M2"}, {DType::f8_e8m0, "F8_E8M0"},
    {DType::i8, "I8"},           {DType::u8, "U8"},           {DType::i16, "I16"},
    {DType::bf16, "BF16"},
    {DType::f16, "F16"},         {DType::f32, "F32"},         {DType::i32, "I32"},
    {DType::i64, "I64"},
}};
}  // namespace

std::string_view dtype_name(DType t) {
  for (const auto& [d, n] : kNames)
    if (d == t) return n;
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& [d, n] : kNames)
    if (n == name) return d;
  return std::nullopt;
}

}  // namespace dsv4
