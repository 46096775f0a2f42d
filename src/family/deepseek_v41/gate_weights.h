// The whole-model gate's weights (docs/numerics.md describes the gate): the seed they are drawn with.
#pragma once

#include <cstdint>

namespace dsv4::family {

// The seed of the gate weights: family::synthetic_weights(cfg, kGateSeed, ..., WeightProfile::gate). The encoder
// seed of the EXL3 gate weights and of a gate pack, and the random values a gate checkpoint writes for the tensors
// the oracle does not read.
inline constexpr uint64_t kGateSeed = 1;

}  // namespace dsv4::family
