// Named model shapes: tiny (CPU, seconds, every layer role), small (CPU-friendly), full (the releases).
#pragma once

#include <string_view>

#include "core/status.h"
#include "family/deepseek_v41/config.h"

namespace dsv4::family {

enum class Preset : uint8_t { tiny, small, full };

std::string_view preset_name(Preset p);
StatusOr<Preset> parse_preset(std::string_view name);    // "tiny" | "small" | "full"
StatusOr<Variant> parse_variant(std::string_view name);  // "v41" | "v4-0731" (also "v4")

// The config of a preset; always passes validate_config. Every preset keeps the real vocabulary
// (129,280 ids, so the real tokenizer applies) and the real Engram compressed vocabulary (99,092).
Config preset_config(Preset p, Variant v);

// The released configs (model-spec.md §2.1 and §2.4 with the official 256 experts).
Config v41_flash_config();
Config v4_flash_0731_config();

}  // namespace dsv4::family
