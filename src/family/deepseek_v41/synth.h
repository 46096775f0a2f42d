// Synthetic checkpoints in the release layout: config.json, sharded safetensors, index, tokenizer.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "family/deepseek_v41/config.h"
#include "family/deepseek_v41/tensors.h"
#include "tokenizer/engram_token_map.h"

namespace dsv4::family {

// Bumped whenever the synthetic bytes of a (config, seed) change, so caches keyed by it never reuse
// output of an older build (the default model's directory name carries it).
inline constexpr int kSynthFormatVersion = 3;

struct SynthProgress {
  int32_t shard = 0;        // shards written so far (1-based; with threads > 1 not the index of `file`)
  int32_t num_shards = 0;
  std::string file;
  int64_t bytes_done = 0;   // payload bytes written so far
  int64_t bytes_total = 0;
};

// Which tensors a writer leaves as file holes: zeros that take no disk blocks, so a checkpoint of the
// release's size fits anywhere. Zero weights serve load tests only (every logit is equal).
enum class SynthSparse : uint8_t {
  none,    // every tensor written
  all,     // every tensor a hole: headers, index, config, token map and tokenizer are all there is
  engram,  // the Engram tables and their scales (layers.N.engram.embed.*) holes, the rest written
};

std::string_view synth_sparse_name(SynthSparse s);              // "none", "all", "engram"
StatusOr<SynthSparse> parse_synth_sparse(std::string_view name);  // the names above

// Whether `t` is left as a hole under `s`.
bool synth_hole(SynthSparse s, const TensorSpec& t);

struct SynthOptions {
  uint64_t seed = 0;  // of the random values (write_checkpoint takes its bytes from its source instead)
  bool sync = true;  // fsync files (off for throwaway test output)
  SynthSparse sparse = SynthSparse::none;  // holes instead of the source's bytes (the source is not asked)
  // Shards written at once when the source allows it (TensorSource::concurrent); 1 writes them in order.
  int threads = 1;
  std::function<void(const SynthProgress&)> progress;  // called after each shard, from one thread at a time
};

struct SynthResult {
  int64_t tensors = 0;
  int64_t payload_bytes = 0;  // logical: holes included
  int64_t hole_bytes = 0;     // payload left as holes (SynthOptions::sparse)
  int32_t shards = 0;
  bool wrote_tokenizer = false;  // false while no tokenizer.json is available to this build
};

// An upper bound of the disk bytes write_checkpoint allocates for `c` with `sparse`: the payload
// outside holes, plus the headers, index, config, Engram token map and tokenizer, plus a 64 KiB
// block allowance per file and per hole edge (partial blocks next to a hole are allocated).
int64_t synth_disk_bytes(const Config& c, SynthSparse sparse);

// The check before writing: ok when `available` bytes at `where` (the nearest existing directory of
// `out`) hold `need`; otherwise resource_exhausted naming both sizes.
Status check_synth_space(std::string_view out, std::string_view where, int64_t need, int64_t available);

// Where a checkpoint writer takes each tensor's stored bytes from: the random values of synth_values.h,
// or the bytes a model already holds (`dsv4 synth --profile gate`, release_encode.h).
struct TensorSource {
  // Fills payload bytes [offset, offset + out.size()) of `t`, a tensor of expected_tensors(c); any
  // boundaries (the writers ask chunk by chunk, tensor after tensor).
  std::function<Status(const TensorSpec& t, int64_t offset, std::span<uint8_t> out)> fill;
  // Written as engram_token_map.json (models with Engram layers); nullopt: synth_engram_token_map(c).
  std::optional<EngramTokenMap> engram_token_map;
  // Where the values come from, as recorded in an EXL3 pack's engram_shards.json ("dsv4 synth, seed 0").
  std::string origin;
  // Whether `fill` may run on several threads at once (SynthOptions::threads).
  bool concurrent = false;
};

// The random values of `c` for `seed` (synth_values.h): what write_synthetic_checkpoint writes.
TensorSource synthetic_tensor_source(const Config& c, uint64_t seed);

// Writes the checkpoint of `c` into `dir` (created if absent; files there with the same names are
// replaced): config.json, the shards of expected_tensors(c) with the bytes of `src` (holes where
// o.sparse says), the index, the Engram token map and tokenizer.json. o.seed is not used (the source
// holds the values). With holes, a file system that allocates them anyway (no sparse files) is
// refused after the first such shard, before it fills the disk.
StatusOr<SynthResult> write_checkpoint(const Config& c, const std::string& dir, const SynthOptions& o,
                                       const TensorSource& src);

// The Engram token map the writers write with `src`: its own, else synth_engram_token_map(c).
StatusOr<EngramTokenMap> engram_token_map_of(const Config& c, const TensorSource& src);

// write_checkpoint with synthetic_tensor_source(c, o.seed). Output is a pure function of (config,
// seed): byte-identical on every run and machine. Memory stays bounded (tensors are generated chunk
// by chunk).
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
