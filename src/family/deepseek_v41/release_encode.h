// A model's tensors as the stored bytes of a release checkpoint, exact or refused, as a TensorSource for
// the family's checkpoint and pack writers.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "family/deepseek_v41/config.h"
#include "family/deepseek_v41/model.h"
#include "family/deepseek_v41/synth.h"

namespace dsv4::family {

// Every tensor of expected_tensors(c) that the oracle reads, as `w` stores it (its bytes are already the
// release's: e4m3 + UE8M0 tiles, packed e2m1, BF16/F32, I64): one error lists every tensor that cannot be written
// (a shape or dtype other than the table's, a linear re-encoded as EXL3, a missing tensor) and every Engram layer
// whose hash layout (primes, offsets, multipliers) is not the one a loaded checkpoint derives from the config
// (model-spec.md §3.4: no tensor holds it). Tensors the oracle does not read (the vision tower, aligner and image
// delimiters; a drafter the weights were drawn without) take the random values of
// synthetic_tensor_source(c, seed). The source keeps `w`'s tensors alive.
StatusOr<TensorSource> release_tensor_source(const Config& c, const Model& w, uint64_t seed);

}  // namespace dsv4::family
