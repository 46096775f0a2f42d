// Random weights for a config in the checkpoint's stored formats (e4m3 + pow2 block scales, e2m1 experts, bf16,
// f32), from a seed, held in memory: the tests, the benchmarks and `dsv4 run --preset` run on these.
#pragma once

#include <cstdint>
#include <memory>

#include "family/deepseek_v41/model.h"

namespace dsv4::family {

// A small V4.1-shaped config exercising every layer role: SWA, Engram, ratio-2 KV+index source,
// ratio-2 reuse, ratio-1 KV+index+candidate source, reuse, reindex with candidates; DSpark.
Config small_test_config();

// A small V4 / 0731-shaped config: SWA, CSA ratio 4 (overlapped compressor, Hadamard FP4
// indexer, top-4), HCA ratio 128, hash-routed layers 0-1, 128x128 weight blocks, no drafter.
Config small_v4_test_config();

// How the values are shaped (docs/numerics.md, "Whole-model gate").
// random: every sub-layer writes unit-RMS outputs into the streams, hc mixes far from identity, a
//   plain random head. Chaotic: a one-spacing rounding difference anywhere is amplified by FP8
//   act_quant, top-k and routing downstream, and logits are flat (top-1 margins below rounding).
//   The exact-equality tests and benchmarks use it.
// gate: closer to a trained model where rounding noise propagates: what a sub-layer writes into the
//   streams is a few percent of them (wo_b and Engram wkv gain 1/32, w2 1/128), hc mixes near
//   identity (pre ~0.25, post ~0.5, comb diagonal ~0.87) with a weak input dependence, norm weights
//   1 +- 0.05, and a head whose top-1 has a margin (each token's successor row carries its
//   embedding). The whole-model gate runs on it (docs/numerics.md: why these numbers).
enum class WeightProfile : uint8_t { random, gate };

// Weights for `cfg` drawn from `seed`, held in memory in the release layout's stored formats: the model of `cfg`
// without its vision tower, and with the drafter stages and heads only when with_dspark (V4.1; a V4-0731 config
// is always drawn without them, as the oracle does not run its drafter).
std::shared_ptr<const Model> synthetic_weights(const Config& cfg, uint64_t seed, bool with_dspark,
                                                       WeightProfile profile = WeightProfile::random);

}  // namespace dsv4::family
