// The CUDA vision tower behind the engine's image seam (engine/image_encoder.h): one image's pixel patches to
// its aligner rows on the device.
#pragma once

#include <memory>

#include "backends/cuda/vision/vision_tower.h"
#include "core/status.h"
#include "engine/image_encoder.h"
#include "family/deepseek_v41/model.h"

namespace dsv4::cuda {

// The seam over a device tower (shared: a test may call the tower directly too).
std::unique_ptr<engine::VisionTower> vision_tower_seam(std::shared_ptr<VisionTowerDevice> tower);

// The model's vision tensors bound and uploaded to `device`. `unavailable` ("vision tower not available: ...")
// when the model has no vision config, its vision tensors do not bind, or the upload fails.
StatusOr<std::unique_ptr<engine::VisionTower>> make_vision_tower(const family::Model& model, int device);

}  // namespace dsv4::cuda
