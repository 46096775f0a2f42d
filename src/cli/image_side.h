// The server's image side for a loaded model: whether it reads images, the processor's sizes and image token, and the
// engine's ImageEncoder around the backend's vision tower (cli/backend_choice.h make_vision_tower).
#pragma once

#include <memory>

#include "core/status.h"
#include "engine/image_encoder.h"
#include "family/deepseek_v41/model.h"
#include "server/image_side.h"

namespace dsv4::cli {

// `tower`: the backend's vision tower, or why there is none. A model without vision (no vision_config, or no image
// delimiters in the checkpoint) refuses images at once, naming why; a model with them but without a tower refuses
// images once they are checked, with the tower's reason.
server::ImageSide make_image_side(const family::Model& model, StatusOr<std::unique_ptr<engine::VisionTower>> tower);

}  // namespace dsv4::cli
