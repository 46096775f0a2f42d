// Loading the oracle's weights from a checkpoint directory (config.json + safetensors) through the
// family's config and expected tensor table; decoding to exact float values.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/weights.h"
#include "core/status.h"
#include "family/deepseek_v41/config.h"

namespace dsv4::cpu {

// The oracle's config from the family's typed config.
ModelConfig model_config_from(const family::Config& c);

// How far a load has come: tensors decoded so far and their stored bytes, out of the checkpoint's.
struct LoadProgress {
  int64_t tensors_done = 0, tensors_total = 0;
  int64_t bytes_done = 0, bytes_total = 0;
};
using LoadProgressFn = std::function<void(const LoadProgress&)>;

// Reads `dir`/config.json, checks every tensor against the expected table (one error listing all
// mismatches), and decodes the weights, calling `progress` after each tensor. The Engram token map
// comes from `dir`/engram_token_map.json when present, else it is derived from the V4.1 tokenizer.
StatusOr<std::shared_ptr<ModelWeights>> load_weights(const std::string& dir, const LoadProgressFn& progress = {});

struct LoadOptions {
  // EXL3 packs (quantization_config.quant_method "exl3", Mia layout, formats.md §1.12): the directory
  // holding the original release shards with the Engram tables, checked against the pack's
  // engram_shards.json (or the built-in V4.1-Flash record) before use. Unused for other checkpoints.
  std::string engram_shards;
  std::vector<std::string>* notes = nullptr;  // receives checks that could not be made (no digest recorded)
};
// The same, for EXL3 packs too: every tensor checked against the Mia layout (one error listing every
// missing, extra or mis-shaped tensor with its file), EXL3 linears decoded once, Engram tables read
// from the release shards of options.engram_shards.
StatusOr<std::shared_ptr<ModelWeights>> load_weights(const std::string& dir, const LoadOptions& options,
                                                     const LoadProgressFn& progress = {});

}  // namespace dsv4::cpu
