// Random weights for a ModelConfig in the checkpoint's number formats (e4m3 + pow2 block scales,
// e2m1 experts, bf16, f32), from a seed: the oracle's tests and benchmarks run on these.
#pragma once

#include <cstdint>
#include <memory>

#include "backends/cpu/weights.h"

namespace dsv4::cpu {

// A small V4.1-shaped config exercising every layer role: SWA, Engram, ratio-2 KV+index source,
// ratio-2 reuse, ratio-1 KV+index+candidate source, reuse, reindex with candidates; DSpark.
ModelConfig small_test_config();

// A small V4 / 0731-shaped config: SWA, CSA ratio 4 (overlapped compressor, Hadamard FP4
// indexer, top-4), HCA ratio 128, hash-routed layers 0-1, 128x128 weight blocks, no drafter.
ModelConfig small_v4_test_config();

// Weights for `cfg` drawn from `seed`; with_dspark adds the drafter stages and heads.
std::shared_ptr<ModelWeights> synthetic_weights(const ModelConfig& cfg, uint64_t seed, bool with_dspark);

}  // namespace dsv4::cpu
