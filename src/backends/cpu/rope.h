// Rotary embedding (model-spec.md §3.2): fp32 frequencies with the exact YaRN blend, interleaved
// pairs on the last rope_dim elements of a vector, forward or inverse (conjugate).
#pragma once

#include <cstdint>
#include <vector>

#include "family/deepseek_v41/rope.h"

namespace dsv4::cpu {

// The frequency tables are the family's (family/deepseek_v41/rope.h).
using family::RopeParams;
using family::rope_frequencies;

// cos/sin of fp32(pos) * f_i, in fp32, for i = 0..dim/2-1.
void rope_cos_sin(const std::vector<float>& freqs, int64_t pos, float* cos_out, float* sin_out);

// Rotates x[0..dim) in place (x points at the rotated tail): pairs (2j, 2j+1) times
// (cos + i sin), or the conjugate when inverse; complex product in Acc, -> bf16. pre (tests): the products
// before the rounding [dim].
template <typename Acc>
void rope_apply(float* x, const std::vector<float>& freqs, int64_t pos, bool inverse, Acc* pre = nullptr);

}  // namespace dsv4::cpu
