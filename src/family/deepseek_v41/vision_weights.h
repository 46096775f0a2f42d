// Vision weights (model-spec.md §3.10, §5.4): the ViT, the aligner and the image delimiter vectors of a V4.1
// checkpoint as typed views into its TensorStore (zero-copy; nothing decoded). Bound on demand, apart from the
// text model's weights, so text-only use never touches these bytes.
#pragma once

#include <vector>

#include "core/status.h"
#include "core/tensor_store.h"
#include "core/tensor_view.h"
#include "family/deepseek_v41/config.h"
#include "family/deepseek_v41/model.h"
#include "family/deepseek_v41/weights.h"

namespace dsv4::family {

// One ViT block (V = vision hidden_size, I = intermediate_size). All bf16.
struct VisionBlockWeights {
  TensorView norm1, norm2;  // [V] RMSNorm weights (eps 1e-6; widened to fp32 exactly)
  Matrix wqkv;              // [3V, V]: rows 0..V-1 q, V..2V-1 k, 2V..3V-1 v; heads of 64 in order
  TensorView wqkv_bias;     // [3V]
  Matrix wo;                // [V, V]
  TensorView wo_bias;       // [V]
  Matrix w1;                // [2I, V]: rows 0..I-1 the SiLU gate, I..2I-1 the up projection (no bias)
  Matrix w2;                // [V, I] (no bias)
};

struct VisionWeights {
  VisionConfig config;
  int64_t hidden = 0;          // D, the text model's width (the aligner's output)
  Matrix patch_embed;          // [V, 3·p·p]: input index c·p² + y·p + x (channel, row in patch, column)
  TensorView patch_embed_bias; // [V]
  std::vector<VisionBlockWeights> blocks;  // [num_hidden_layers]
  TensorView norm;             // [V] final RMSNorm
  Matrix aligner_w1;           // [D, V·r²] (r = downsample_ratio): input index c·r² + r·kh + kw
  TensorView aligner_w1_bias;  // [D]
  Matrix aligner_w2;           // [D, D]
  TensorView aligner_w2_bias;  // [D]
  TensorView image_start, image_end, image_newline;  // [D] span delimiter rows
};

// Binds the vision tensors of `c` (V4.1 with vision_config) from `store`. Every tensor missing, or of another
// dtype or shape than the release table (expected_tensors) gives it, is named in one error (data_loss); a config
// without vision_config is refused (invalid_argument). The views point into `store`, which must outlive them.
StatusOr<VisionWeights> bind_vision_weights(const Config& c, const TensorStore& store);
// The same from a model's stores (its checkpoint; the model must outlive the views).
StatusOr<VisionWeights> bind_vision_weights(const Model& m);

}  // namespace dsv4::family
