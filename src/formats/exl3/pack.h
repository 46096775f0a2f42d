// Reading one EXL3 linear (trellis, suh/svh or legacy su/sv, codebook marker, bias) from a checkpoint.
#pragma once

#include <string_view>

#include "core/tensor_store.h"
#include "core/status.h"
#include "formats/exl3/linear.h"

namespace dsv4::exl3 {

// True when `prefix`.trellis exists: the group is EXL3-coded (dispatch is per tensor group, not per
// config, since hybrid packs keep some linears in their native format).
bool is_exl3_group(const TensorStore& checkpoint, std::string_view prefix);

// Loads the linear whose tensors are named `prefix`.trellis, .suh/.su, .svh/.sv, .mcg/.mul1, .bias. The trellis
// stays where the store holds it (borrowed: the store must outlive the linear); the small vectors are copied.
// Errors name the checkpoint, the tensor and what is wrong (dtype, shape, marker value).
StatusOr<Linear> load_linear(const TensorStore& checkpoint, std::string_view prefix);

}  // namespace dsv4::exl3
