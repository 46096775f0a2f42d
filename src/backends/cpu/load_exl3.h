// EXL3 packs on the oracle: one pack linear (or wo_a's slices) decoded into an Exl3Weight.
#pragma once

#include <memory>
#include <string_view>

#include "backends/cpu/exl3_linear.h"
#include "core/checkpoint.h"
#include "core/status.h"
#include "family/deepseek_v41/exl3_layout.h"

namespace dsv4::cpu {

// Appends to `w` the stored linear L of group g (L's dims must be g's padded dims) as its next
// block-diagonal part: Wq decoded once (exl3::decode_wq), exactly, and kept transposed; suh, svh and
// bias widened to float; L itself kept for a device to upload. Shared by the loader and in-memory
// re-encodings (synthetic_exl3.h), so both hold what the oracle and a device compute from.
void add_exl3_part(Exl3Weight& w, const family::Exl3Group& g, exl3::Linear L);

// Reads and decodes the EXL3 linears standing for `release_group` (one, or o_groups slices as
// block-diagonal parts) via exl3::load_linear; Wq is decoded once, exactly, and kept transposed.
// nullptr when the plan has no EXL3 linear for that group. Errors name the tensor and the file.
StatusOr<std::shared_ptr<const Exl3Weight>> load_exl3_weight(const Checkpoint& ck, const family::Exl3PackPlan& plan,
                                                             std::string_view release_group);

}  // namespace dsv4::cpu
