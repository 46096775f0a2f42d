// The oracle's view of the family's typed config (the checkpoint itself opens as family::Model,
// family/deepseek_v41/model.h).
#pragma once

#include "backends/cpu/model_config.h"
#include "family/deepseek_v41/config.h"

namespace dsv4::cpu {

// The oracle's config from the family's typed config.
ModelConfig model_config_from(const family::Config& c);

}  // namespace dsv4::cpu
