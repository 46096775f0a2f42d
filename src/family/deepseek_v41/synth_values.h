// Deterministic synthetic tensor contents: per-role distributions, quantized with the release's formats.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "family/deepseek_v41/config.h"
#include "family/deepseek_v41/tensors.h"

namespace dsv4::family {

// How the values of one tensor are drawn (before any quantization): mean + std * g, with g a
// bounded unit-variance noise (sum of four uniforms, |g| <= 2*sqrt(3)). Every value is a pure function
// of (seed, tensor name, element index): independent of write order and chunking, no libm calls,
// so the bytes are identical on every machine.
struct SynthDistribution {
  double mean = 0;
  double std = 0;
};

// The distribution chosen for a tensor (for a scale tensor: that of its weight). Choices and why:
// linears std gain/sqrt(fan_in) so every projection keeps unit RMS (output projections gain 0.5 so
// the residual stream stays dominated by the token embedding and positions do not collapse);
// norms 1 +- 0.05; embeddings std 1; LM head gain 2 (peaked, token-dependent logits); mHC bases
// making pre ~ 0.25 per stream, post ~ 0.5, comb near identity, with small fn/scale so the mixes
// depend on the input but stay finite; router bias +-0.02 so routing follows the (spread) scores.
SynthDistribution synth_distribution(const Config& c, const TensorSpec& t);

// Bytes of dim-0 rows [r0, r1) of tensor `t` as stored (a "row" of a 1-D tensor is one element;
// of an FP8 scale tensor, one block row of scales). Quantized tensors use the release formats:
// FP8 weights e4m3 with the UE8M0 tile scale pow2ceil(amax/448); FP4 experts e2m1 with per-32 scale
// pow2ceil(amax/6); Engram rows e4m3 with per-32 scales; tid2eid distinct expert ids per row.
// `table` is the tensor's own table (scales are computed from their weight's values).
std::vector<uint8_t> synth_rows(const Config& c, const TensorTable& table, const TensorSpec& t, uint64_t seed,
                                int64_t r0, int64_t r1);

// Fills out with payload bytes [offset, offset + out.size()) of `t` (any boundaries).
void synth_bytes(const Config& c, const TensorTable& table, const TensorSpec& t, uint64_t seed, int64_t offset,
                 std::span<uint8_t> out);

// The bounded unit-variance noise value i of the stream keyed by (seed, name).
uint64_t synth_stream_key(uint64_t seed, std::string_view name);
double synth_noise(uint64_t key, uint64_t i);

}  // namespace dsv4::family
