// Loading the oracle's weights from a checkpoint directory (config.json + safetensors) through the
// family's config and expected tensor table; decoding to exact float values.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

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

}  // namespace dsv4::cpu
