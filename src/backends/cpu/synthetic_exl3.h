// Synthetic weights with the linears of the EXL3 Mia layout re-encoded in memory, as the pack writer
// encodes them and as the loader decodes them: the weights of the EXL3 whole-model gate.
#pragma once

#include <cstdint>
#include <memory>

#include "backends/cpu/weights.h"
#include "core/status.h"
#include "family/deepseek_v41/config.h"

namespace dsv4::cpu {

// Replaces in `w` every linear that an EXL3 pack of `c` stores as EXL3 (family::exl3_pack_plan) by the
// linear write_synthetic_exl3_pack would store for the same exact value (family::encode_synth_exl3
// with `seed`), decoded by add_exl3_part as load_weights decodes a pack: the oracle and a device then
// compute it exactly as on a loaded pack. Its dense values are dropped, as a loaded pack has none.
// The DSpark groups are skipped when `w` has no drafter; any other group of the plan that `w` lacks,
// or whose dims differ from the plan's, is an error and leaves `w` unchanged. Linears are encoded
// side by side on `threads` threads (0: one per core); the result does not depend on it.
Status reencode_as_exl3(const family::Config& c, ModelWeights& w, uint64_t seed, int threads = 0);

// The EXL3 whole-model gate's weights (docs/numerics.md): the gate weights of `c` (synthetic_weights
// with gate::kSeed, no drafter, WeightProfile::gate) with the Mia layout's linears re-encoded as
// above, encoder seed gate::kSeed. Only V4.1 configs have a pack layout.
StatusOr<std::shared_ptr<ModelWeights>> exl3_gate_weights(const family::Config& c, int threads = 0);

}  // namespace dsv4::cpu
