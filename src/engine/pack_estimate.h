// The stored tensors an EXL3 pack of a V4.1 config would have at a given bit width, for sizing before one exists.
//
// The pack's layout is the Mia layout (family/deepseek_v41/exl3_layout.h): every EXL3 linear holds a trellis of
// in_padded x out_padded x bits / 8 bytes (I16 [in/16, out/16, 16·bits]) and its F16 input and output sign
// vectors (suh [in_padded], svh [out_padded]); native tensors keep their release bytes; the Engram tables stay in
// the release shards (listed here, as a pack's caller passes them). Real packs mix widths per linear (formats.md
// §1.9); this assumes one width for all, so it is an estimate of a pack of about that average.
#pragma once

#include <vector>

#include "core/status.h"
#include "engine/weight_share.h"
#include "family/deepseek_v41/exl3_layout.h"

namespace dsv4::engine {

// The tensors of a `bits`-wide pack of `plan`'s layout (family::exl3_pack_plan; V4.1 only).
StatusOr<std::vector<StoredTensor>> exl3_pack_estimate(const family::Exl3PackPlan& plan, int bits);

}  // namespace dsv4::engine
