// The oracle's weights as the stored bytes of a release checkpoint: the inverse of load_weights, exact
// or refused, as a family::TensorSource for the family's checkpoint and pack writers.
#pragma once

#include <cstdint>

#include "backends/cpu/weights.h"
#include "core/status.h"
#include "family/deepseek_v41/config.h"
#include "family/deepseek_v41/synth.h"

namespace dsv4::cpu {

// Encodes every tensor of family::expected_tensors(c) that load_weights reads from `w` in its file
// dtype: FP8 linears as e4m3 codes + UE8M0 block scales (attn.wo_a from its dequantized bf16 values),
// routed experts as packed e2m1 + UE8M0 scales, BF16/F32 tensors as they are, tid2eid as I64, the
// Engram tables' e4m3 codes and scales as held; the Engram token map from `w`. Every value is checked
// to decode back bit for bit; one error lists every tensor that cannot be held (a value its dtype
// cannot represent, a shape other than the table's, an EXL3 linear, a missing weight) and every Engram
// layer whose hash layout (primes, offsets, multipliers) is not the one load_weights derives from the
// config (model-spec.md §3.4: no tensor holds it). Tensors load_weights does not read (the vision
// tower, aligner and image delimiters; V4-0731's drafter) take the random values of
// family::synthetic_tensor_source(c, seed). The source holds its own copy of the encoded bytes.
StatusOr<family::TensorSource> release_tensor_source(const family::Config& c, const ModelWeights& w, uint64_t seed);

}  // namespace dsv4::cpu
