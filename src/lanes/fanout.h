// A request's n choices (Request::n): member i has the RequestId the submit returned plus i and draws with
// member_seed(seed, i), so choice i equals a solo request that passes that seed, token for token.
#pragma once

#include <cstdint>

#include "lanes/sampling.h"

namespace dsv4::lanes {

// The seed of choice `index` of a request whose seed is `seed`: the seed itself for choice 0 (so n = 1 is a plain
// request), else the index-th SplitMix64 output started at the seed.
constexpr uint64_t member_seed(uint64_t seed, int32_t index) {
  return index == 0 ? seed : splitmix64_nth(seed, static_cast<uint64_t>(index));
}

}  // namespace dsv4::lanes
