// Synthetic checkpoints in the release layout: config.json, sharded safetensors, index, tokenizer.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "family/deepseek_v41/config.h"
#include "tokenizer/engram_token_map.h"

namespace dsv4::family {

// Bumped whenever the synthetic bytes of a (config, seed) change, so caches keyed by it never reuse
// output of an older build (the default model's directory name carries it).
inline constexpr int kSynthFormatVersion = 3;

struct SynthProgress {
  int32_t shard = 0;        // 1-based, the shard just written
  int32_t num_shards = 0;
  std::string file;
  int64_t bytes_done = 0;   // payload bytes written so far
  int64_t bytes_total = 0;
};

struct SynthOptions {
  uint64_t seed = 0;
  bool sync = true;  // fsync files (off for throwaway test output)
  std::function<void(const SynthProgress&)> progress;  // called after each shard
};

struct SynthResult {
  int64_t tensors = 0;
  int64_t payload_bytes = 0;
  int32_t shards = 0;
  bool wrote_tokenizer = false;  // false while no tokenizer.json is available to this build
};

// Writes the checkpoint of `c` into `dir` (created if absent; files there with the same names are
// replaced). Output is a pure function of (config, seed): byte-identical on every run and machine.
// Values per synth_values.h. Memory stays bounded (tensors are generated chunk by chunk).
StatusOr<SynthResult> write_synthetic_checkpoint(const Config& c, const std::string& dir, const SynthOptions& o);

// The tokenizer.json to ship with a synthetic checkpoint (the V4.1 tokenizer; V4-0731 uses the same
// vocabulary). This is the single point where synth obtains it; nullopt when this build has none.
std::optional<std::string_view> synth_tokenizer_json();

// The Engram token map written as engram_token_map.json beside the weights (models with Engram
// layers): the release's map derived from the embedded V4.1 tokenizer when the config has its
// vocabulary (129,280 ids) and compressed vocabulary (99,092), else synthetic_engram_token_map.
StatusOr<EngramTokenMap> synth_engram_token_map(const Config& c);

// A stand-in map for configs with another vocabulary: [vocab_size] ids in
// [0, engram_compressed_vocab_size), ids below the compressed size keep their id (so every compressed
// id is used, in first-appearance order, and pad 2 -> 2 as in the release), the rest fold onto a hashed id.
std::vector<int32_t> synthetic_engram_token_map(const Config& c);

}  // namespace dsv4::family
