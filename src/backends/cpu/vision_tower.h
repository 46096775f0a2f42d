// The CPU oracle's vision tower behind the engine's image seam: one image's pixel patches to its aligner rows
// through backends/cpu/vision.h on the model's vision weights (bound once, views into the mapped checkpoint).
#pragma once

#include <memory>

#include "backends/cpu/forward.h"
#include "core/status.h"
#include "engine/image_encoder.h"
#include "family/deepseek_v41/model.h"

namespace dsv4::cpu {

// `unavailable` ("vision tower not available: ...") when the model has no vision config or its vision tensors do not
// bind. `threads` <= 0: every core.
StatusOr<std::unique_ptr<engine::VisionTower>> make_vision_tower(std::shared_ptr<const family::Model> model,
                                                                 Precision precision, int threads);

}  // namespace dsv4::cpu
