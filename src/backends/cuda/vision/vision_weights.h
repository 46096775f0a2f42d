// The vision tower's weights on the device (model-spec.md §3.10): every ViT and aligner tensor of the bound
// checkpoint views copied once, bf16 as stored, into one allocation laid out as engine::vision_weight_bytes
// counts it (patch_embed padded with zero columns to engine::vision_patch_width). Vectors (norm weights,
// biases) stay bf16; kernels widen them exactly.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cuda/model/weights.h"
#include "backends/cuda/runtime/device_buffer.h"
#include "core/status.h"
#include "family/deepseek_v41/vision_weights.h"

namespace dsv4::cuda {

struct VisionBlockDevice {
  const uint16_t* norm1 = nullptr;
  const uint16_t* norm2 = nullptr;
  Bf16View wqkv;                     // [3V, V]
  const uint16_t* wqkv_bias = nullptr;
  Bf16View wo;                       // [V, V]
  const uint16_t* wo_bias = nullptr;
  Bf16View w1;                       // [2I, V]: gate rows, then up rows
  Bf16View w2;                       // [V, I]
};

struct VisionDeviceWeights {
  family::VisionConfig config;
  int64_t hidden = 0;                // D
  int64_t patch_width = 0;           // 3·p² rounded up to 8
  Bf16View patch_embed;              // [V, patch_width]
  const uint16_t* patch_embed_bias = nullptr;
  std::vector<VisionBlockDevice> blocks;
  const uint16_t* norm = nullptr;
  Bf16View aligner_w1;               // [D, V·r²]
  const uint16_t* aligner_w1_bias = nullptr;
  Bf16View aligner_w2;               // [D, D]
  const uint16_t* aligner_w2_bias = nullptr;
  DeviceBuffer memory;               // owns every pointer above
  int64_t bytes() const { return static_cast<int64_t>(memory.bytes()); }
};

// Uploads `w` to the current device. invalid_argument when a tensor is not bf16 of the shape the config
// gives (or an EXL3 linear), resource_exhausted when the allocation fails.
StatusOr<VisionDeviceWeights> upload_vision_weights(const family::VisionWeights& w);

}  // namespace dsv4::cuda
