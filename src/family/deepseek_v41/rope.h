// RoPE frequencies of a layer (model-spec.md §3.2): the fp32 table every backend rotates with, evaluated
// exactly as the reference does (YaRN blend on the compressed layers).
#pragma once

#include <cstdint>
#include <vector>

#include "family/deepseek_v41/layer_plan.h"

namespace dsv4::family {

struct RopeParams {
  int dim = 64;              // rotated dims (the last `dim` elements of a vector)
  double base = 10000.0;
  int64_t original_seq_len = 0;  // > 0 enables YaRN
  double factor = 16.0;
  double beta_fast = 32.0, beta_slow = 1.0;
};

// The parameters of the plan's layers: plain (rope_theta, no YaRN; compress_ratio 0) or YaRN
// (compress_rope_theta; compressed layers), as LayerPlan::yarn says.
RopeParams rope_params(const ModelPlan& plan, bool yarn);

// The dim/2 fp32 frequencies f_i.
std::vector<float> rope_frequencies(const RopeParams& p);

}  // namespace dsv4::family
