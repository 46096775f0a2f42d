// Loading EXL3 linears from mapped checkpoint tensors (data may be unaligned: copied with memcpy).
#include "formats/exl3/pack.h"

#include <cstring>
#include <string>

#include "formats/exl3/half.h"

namespace dsv4::exl3 {
namespace {

Status bad_tensor(const TensorStore& checkpoint, const std::string& name, std::string_view what) {
  return error(StatusCode::invalid_argument, "{}: tensor '{}': {}", checkpoint.path(), name, what);
}

std::vector<uint16_t> copy_u16(const TensorView& view) {
  std::vector<uint16_t> out(static_cast<size_t>(view.nbytes / 2));
  std::memcpy(out.data(), view.data, out.size() * 2);
  return out;
}

// fp16 vector of length n from `name` (F16 [n]), or from the legacy packed sign bits `legacy`
// (I16 [n/16], bit b of word w set -> element 16w+b is -1).
StatusOr<std::vector<uint16_t>> load_scale(const TensorStore& checkpoint, const std::string& name,
                                           const std::string& legacy, int64_t n) {
  if (checkpoint.contains(name)) {
    DSV4_ASSIGN_OR_RETURN(TensorView view, checkpoint.tensor(name));
    if (view.dtype != DType::f16 || view.rank() != 1 || view.dim(0) != n)
      return bad_tensor(checkpoint, name, fmt::format("expected F16 [{}], found {} {}", n,
                                                      dtype_name(view.dtype), shape_string(view.shape)));
    return copy_u16(view);
  }
  if (checkpoint.contains(legacy)) {
    DSV4_ASSIGN_OR_RETURN(TensorView view, checkpoint.tensor(legacy));
    if (view.dtype != DType::i16 || view.rank() != 1 || view.dim(0) * 16 != n)
      return bad_tensor(checkpoint, legacy, fmt::format("expected I16 [{}] sign bits, found {} {}", n / 16,
                                                        dtype_name(view.dtype), shape_string(view.shape)));
    const std::vector<uint16_t> bits = copy_u16(view);
    std::vector<uint16_t> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out[i] = ((bits[i / 16] >> (i % 16)) & 1) ? 0xBC00 : 0x3C00;  // -1 / +1
    return out;
  }
  return error(StatusCode::not_found, "{}: EXL3 layer needs '{}' (or legacy '{}')", checkpoint.path(), name, legacy);
}

}  // namespace

bool is_exl3_group(const TensorStore& checkpoint, std::string_view prefix) {
  return checkpoint.contains(std::string(prefix) + ".trellis");
}

StatusOr<Linear> load_linear(const TensorStore& checkpoint, std::string_view prefix) {
  Linear layer;
  layer.name = std::string(prefix);
  const std::string p = layer.name + ".";
  DSV4_ASSIGN_OR_RETURN(TensorView trellis, checkpoint.tensor(p + "trellis"));
  if (trellis.dtype != DType::i16 || trellis.rank() != 3)
    return bad_tensor(checkpoint, p + "trellis", fmt::format("expected I16 [in/16, out/16, 16·bits], found {} {}",
                                                             dtype_name(trellis.dtype), shape_string(trellis.shape)));
  const int64_t last = trellis.dim(2);
  if (last % 16 != 0)
    return error(StatusCode::unimplemented, "{}: tensor '{}trellis': {} words per tile is a fractional bit width, "
                 "which this build does not decode", checkpoint.path(), p, last);
  layer.in_features = trellis.dim(0) * 16;
  layer.out_features = trellis.dim(1) * 16;
  layer.bits = static_cast<int>(last / 16);
  layer.trellis = Words::borrow(trellis.data, trellis.nbytes / 2);  // stays in the mapped file

  DSV4_ASSIGN_OR_RETURN(layer.suh, load_scale(checkpoint, p + "suh", p + "su", layer.in_features));
  DSV4_ASSIGN_OR_RETURN(layer.svh, load_scale(checkpoint, p + "svh", p + "sv", layer.out_features));

  const auto marker = [&](const char* suffix, uint32_t expect) -> StatusOr<bool> {
    const std::string name = p + suffix;
    if (!checkpoint.contains(name)) return false;
    DSV4_ASSIGN_OR_RETURN(TensorView view, checkpoint.tensor(name));
    if (view.dtype != DType::i32 || view.nbytes != 4)
      return bad_tensor(checkpoint, name, "codebook marker must be an I32 scalar");
    uint32_t value;
    std::memcpy(&value, view.data, 4);
    if (value != expect)
      return bad_tensor(checkpoint, name, fmt::format("codebook marker 0x{:08X}, expected 0x{:08X}", value, expect));
    return true;
  };
  DSV4_ASSIGN_OR_RETURN(bool mcg, marker("mcg", kMcgMultiplier));
  DSV4_ASSIGN_OR_RETURN(bool mul1, marker("mul1", kMul1Multiplier));
  if (mcg && mul1) return bad_tensor(checkpoint, p + "mul1", "both .mcg and .mul1 markers are present");
  layer.codebook = mcg ? Codebook::mcg : mul1 ? Codebook::mul1 : Codebook::inst3;

  if (checkpoint.contains(p + "bias")) {
    DSV4_ASSIGN_OR_RETURN(TensorView bias, checkpoint.tensor(p + "bias"));
    if (bias.dtype != DType::f16 || bias.rank() != 1 || bias.dim(0) != layer.out_features)
      return bad_tensor(checkpoint, p + "bias", fmt::format("expected F16 [{}]", layer.out_features));
    layer.bias = copy_u16(bias);
  }
  DSV4_RETURN_IF_ERROR(validate(layer));
  return layer;
}

}  // namespace dsv4::exl3
