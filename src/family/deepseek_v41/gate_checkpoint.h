// The whole-model gate's weights written as files (`dsv4 synth --profile gate`), and the weights those
// files load to (docs/numerics.md "The gate on written files").
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "family/deepseek_v41/config.h"
#include "family/deepseek_v41/model.h"
#include "family/deepseek_v41/synth.h"
#include "family/deepseek_v41/synth_exl3.h"

namespace dsv4::family {

// `w` with the hash layout of every Engram layer set to the one a loaded checkpoint derives from `c`
// (compute_engram_layout): the multipliers become the release's (model-spec.md §3.4c). Primes and
// offsets must already agree; an error otherwise.
StatusOr<std::shared_ptr<const Model>> with_release_engram_hash(const Config& c, const Model& w);

// The gate weights as a release checkpoint holds them: synthetic_weights(kGateSeed,
// WeightProfile::gate) of `c`, with the drafter when `c` has one (drawn after every other weight, so
// the rest is the gate weights bit for bit), then with_release_engram_hash. Every tensor is the gate
// weights'. What no file can hold differs on V4.1: the gate weights draw their own Engram hash
// multipliers, so V4.1 logits are those of these weights, not of the in-memory gate weights. On
// V4-0731 (no Engram) they are the gate weights.
StatusOr<std::shared_ptr<const Model>> written_gate_weights(const Config& c);

// What a gate pack (write_gate_exl3_pack, V4.1) loads to, up to its drafter (absent here):
// exl3_gate_weights(c) with with_release_engram_hash, and the image-token router bias replaced by the
// router bias, as opening a pack does (the Mia layout has no ffn.gate.bias_vl; text rows never
// read it, so logits of text prompts are exl3_gate_weights' with the release's Engram hash).
StatusOr<std::shared_ptr<const Model>> written_exl3_gate_weights(const Config& c, int threads = 0);

// `dsv4 synth --profile gate --format release`: written_gate_weights(c) encoded by
// release_tensor_source (tensors the oracle does not read: the random values of seed kGateSeed)
// and written by write_checkpoint. Refused, naming the tensors, when a value has no exact
// encoding. o.seed is not used.
StatusOr<SynthResult> write_gate_checkpoint(const Config& c, const std::string& dir, const SynthOptions& o);

// `--format exl3`: the same source written by write_exl3_pack with encoder seed kGateSeed
// (o.seed is replaced), so every EXL3 linear is the one exl3_gate_weights holds; the Engram release
// shards go to o.release_dir.
StatusOr<Exl3SynthResult> write_gate_exl3_pack(const Config& c, const std::string& dir, Exl3SynthOptions o);

}  // namespace dsv4::family
