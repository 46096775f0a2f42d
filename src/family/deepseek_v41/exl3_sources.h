// An EXL3 pack's config (EXL3 quantization_config over the release's model keys) and the original
// release shards its Engram tables come from, with their recorded sizes and digests.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/checkpoint.h"
#include "core/status.h"
#include "family/deepseek_v41/config.h"
#include "family/deepseek_v41/exl3_layout.h"
#include "family/deepseek_v41/tensors.h"
#include "formats/exl3/quant_config.h"

namespace dsv4::family {

struct Exl3PackConfig {
  Config config;            // the model, with the release's quantization_config (FP8 settings)
  exl3::QuantConfig quant;  // the pack's EXL3 quantization_config
};

// True when the config.json text declares quantization_config.quant_method "exl3".
bool is_exl3_config_text(std::string_view json_text);

// Parses an EXL3 pack's config.json: quantization_config per exl3::parse_quant_config; the model keys
// as for the release, with original_quantization_config (ExLlamaV3 keeps the source's there,
// formats.md §1.10) or, when absent, the V4.1 release's FP8 settings. Validates the model config.
StatusOr<Exl3PackConfig> parse_exl3_pack_config(std::string_view json_text);

// config.json text of a pack: the release config with its quantization_config moved to
// original_quantization_config and the EXL3 one in its place.
std::string exl3_pack_config_json(const Config& c, const exl3::QuantConfig& q);

// `pack_dir`/quantization_config.json, when the pack has one, parsed and cross-checked with the
// tensors (validate_tensor_storage); ok when there is none (it is optional, formats.md §1.10).
Status check_pack_tensor_storage(const std::string& pack_dir, const Exl3PackPlan& plan,
                                 const std::vector<FoundTensor>& found);

// One original release shard the pack needs.
struct ReleaseShard {
  std::string file;                  // "model-00047-of-00048.safetensors"
  int64_t bytes = 0;                 // file size; 0 = not recorded
  std::string sha256;                // lower-case hex; empty = not recorded
  std::vector<std::string> tensors;  // the tensors read from it
};

struct EngramSources {
  std::string origin;                // what the record describes, for messages
  std::vector<ReleaseShard> shards;
};

// Written beside a pack's config.json by `dsv4 synth --format exl3` (the synthetic release shards'
// sizes and SHA-256); a downloaded pack has none and uses the built-in release record instead.
inline constexpr std::string_view kEngramSourcesFile = "engram_shards.json";

// The built-in record for DeepSeek-V4.1-Flash (HF revision dba1be0a…): shards 47 and 48 with the file
// sizes of model-spec.md §5.5. Their SHA-256 digests are not in the project's reference documents, so
// none is recorded (the check then covers size, header, names, dtypes and shapes, and says so).
EngramSources v41_flash_release_engram_sources();

std::string engram_sources_json(const EngramSources& s);
StatusOr<EngramSources> parse_engram_sources(std::string_view json_text, std::string_view source_name);

// The record for a pack: `pack_dir`/engram_shards.json when present, else the built-in release record
// when the config has the release's Engram tables, else an error saying what is missing.
StatusOr<EngramSources> engram_sources_for(const std::string& pack_dir, const Config& c, const TensorTable& release);

// Opens every recorded shard in `dir` after checking it: present, recorded size, recorded SHA-256, and
// each listed tensor with the release table's dtype and shape. Errors name the file and the problem.
// `notes` receives one line per check that could not be made (no digest recorded).
StatusOr<std::vector<Checkpoint>> open_engram_shards(const std::string& dir, const EngramSources& s,
                                                     const TensorTable& release, std::vector<std::string>* notes);

}  // namespace dsv4::family
