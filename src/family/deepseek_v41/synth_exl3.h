// Synthetic EXL3 packs in the Mia layout: the synthetic release's linears re-encoded as EXL3, plus the
// synthetic release shards that hold the Engram tables (with their recorded digests).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "core/status.h"
#include "family/deepseek_v41/config.h"
#include "family/deepseek_v41/exl3_layout.h"
#include "family/deepseek_v41/synth.h"
#include "formats/exl3/linear.h"

namespace dsv4::family {

struct Exl3SynthOptions {
  uint64_t seed = 0;      // the synthetic release's seed (the pack approximates it) and the encoder's
  bool sync = true;
  std::string release_dir;  // where the release's Engram shards are written (created if absent)
  std::function<void(const SynthProgress&)> progress;  // after each pack shard
};

struct Exl3SynthResult {
  int64_t tensors = 0;          // in the pack
  int64_t payload_bytes = 0;
  int32_t shards = 0;
  int32_t exl3_linears = 0;
  double bits = 0;              // average bits per weight over the EXL3 linears (padding included)
  int32_t release_shards = 0;   // written to release_dir
};

// Bits per weight of one synthetic EXL3 linear (data, chosen to cover several widths as the Mia pack
// mixes them, formats.md §1.9): routed experts 2 (even ids) or 3 (odd), attention and its compressor/
// indexer 5, shared experts, Engram, the head and DSpark stages 4.
int exl3_synth_bits(const Exl3Group& g);

// The EXL3 linear the synthetic pack stores for group `g`, from the release linear's exact values
// `dense` [release out, in] (row-major; wo_a's slice g reads rows [g·g.out, (g+1)·g.out)): transposed
// to W [in, out], zero-padded to g's padded dims and encoded by exl3::quantize_linear with
// exl3_synth_bits(g) and the synthetic codebook (mul1; shared experts MCG; the head 3INST). A pure
// function of (g, dense, seed): the pack writer and in-memory re-encodings (synthetic_exl3.h) share it.
exl3::Linear encode_synth_exl3(const Exl3Group& g, std::span<const float> dense, uint64_t seed);

// Writes the pack of `c` into `dir` (config.json with an EXL3 quantization_config, quantization_config.json
// with tensor_storage, sharded safetensors
// with the release's shard numbering, index, engram_shards.json, tokenizer and Engram token map) and
// the release shards holding the Engram tables into o.release_dir, byte-identical to the shards
// write_synthetic_checkpoint writes for the same seed. Every EXL3 linear is the release linear's
// exact value encoded by exl3::quantize_linear; codebooks: mul1 (markers .mul1), shared experts MCG,
// the head 3INST (no marker), so every marker form is exercised. A pure function of (config, seed).
StatusOr<Exl3SynthResult> write_synthetic_exl3_pack(const Config& c, const std::string& dir,
                                                    const Exl3SynthOptions& o);

// The same pack with every release tensor's bytes from `src` (write_synthetic_exl3_pack is this with
// synthetic_tensor_source(c, o.seed)): native tensors and the Engram release shards as `src` holds
// them, each EXL3 linear encoded from the values its release bytes decode to, encoder seed o.seed.
StatusOr<Exl3SynthResult> write_exl3_pack(const Config& c, const std::string& dir, const Exl3SynthOptions& o,
                                          const TensorSource& src);

}  // namespace dsv4::family
