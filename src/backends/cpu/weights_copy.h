// A copy of decoded weights that shares their EXL3 linears: one model decoded (or EXL3-encoded) once, then
// cut per tensor-parallel rank (fabric/rank_weights.h) without decoding or encoding it again per rank.
#pragma once

#include <memory>

#include "backends/cpu/weights.h"

namespace dsv4::cpu {

// Every dense tensor of `w` copied; every EXL3 linear (Exl3Weight, immutable once built) shared with `w`.
// A cut replaces a copy's shared pointers by new linears and never changes the shared ones, so `w` and
// every copy stay valid and independent.
std::shared_ptr<ModelWeights> copy_sharing_exl3(const ModelWeights& w);

}  // namespace dsv4::cpu
