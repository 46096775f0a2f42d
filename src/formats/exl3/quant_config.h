// EXL3 quantization_config (config.json) and quantization_config.json with per-module tensor_storage.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "formats/exl3/codebook.h"

namespace dsv4::exl3 {

// One stored tensor as quantization_config.json describes it.
struct StoredTensor {
  std::vector<int64_t> shape;
  int64_t n_bytes = 0;
  std::string dtype;  // torch spelling, e.g. "torch.int16"
};

// One module's entry of tensor_storage.
struct ModuleStorage {
  std::map<std::string, StoredTensor> stored_tensors;
  bool exl3 = false;                 // quant_format == "exl3"
  int bits_per_weight = 0;           // K, EXL3 modules only
  std::optional<Codebook> codebook;  // from mcg_multiplier / mul1_multiplier (absent = 3INST)
};

struct QuantConfig {
  std::string version;                 // ExLlamaV3 version that wrote the pack, e.g. "1.4.1"
  double bits = 0;                     // target average bits per weight
  int head_bits = 0;
  std::optional<int> mtp_bits;
  std::string out_scales;              // "always" | "never" | "auto"
  Codebook codebook = Codebook::inst3;
  std::map<std::string, ModuleStorage> tensor_storage;  // empty when read from config.json only
};

// Parses the JSON text of a quantization_config (either form); refuses quant_method != "exl3",
// unknown codebooks and multiplier values that do not match a known codebook, naming the key.
StatusOr<QuantConfig> parse_quant_config(std::string_view json_text, std::string_view source_name);

// quantization_config.json text (the config keys plus tensor_storage when it is not empty), in the
// form ExLlamaV3 writes (formats.md §1.10); parse_quant_config reads it back.
std::string quant_config_to_json(const QuantConfig& q);

}  // namespace dsv4::exl3
