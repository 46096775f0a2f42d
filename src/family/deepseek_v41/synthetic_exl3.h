// Synthetic weights with the linears of the EXL3 Mia layout re-encoded in memory, as the pack writer
// encodes them and as the loader decodes them: the weights of the EXL3 whole-model gate.
#pragma once

#include <cstdint>
#include <memory>

#include "core/status.h"
#include "family/deepseek_v41/config.h"
#include "family/deepseek_v41/model.h"

namespace dsv4::family {

// `w` with every linear that an EXL3 pack of `c` stores as EXL3 (exl3_pack_plan) replaced by the linear
// write_synthetic_exl3_pack would store for the same exact value (encode_synth_exl3 with `seed`), held as
// a pack's EXL3 linear: the oracle and a device then compute it exactly as on a loaded pack. Its dense views are
// dropped, as a loaded pack has none. The DSpark groups are skipped when `w` has no drafter; any other group of
// the plan that `w` lacks, or whose dims differ from the plan's, is an error. Linears are encoded side by side
// on `threads` threads (0: one per core); the result does not depend on it.
StatusOr<std::shared_ptr<const Model>> reencode_as_exl3(const Config& c, const Model& w, uint64_t seed,
                                                        int threads = 0);

// The EXL3 whole-model gate's weights (docs/numerics.md): the gate weights of `c` (synthetic_weights
// with kGateSeed, no drafter, WeightProfile::gate) with the Mia layout's linears re-encoded as
// above, encoder seed kGateSeed. Only V4.1 configs have a pack layout.
StatusOr<std::shared_ptr<const Model>> exl3_gate_weights(const Config& c, int threads = 0);

}  // namespace dsv4::family
