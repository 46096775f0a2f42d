// Where a backend's vision tower is wired into `dsv4 serve`: the tower for a model on the chosen backend, or why there
// is none. The server's image side encodes each image through it (cli/image_side.h).
#pragma once

#include <memory>

#include "cli/backend_choice.h"
#include "core/status.h"
#include "engine/image_encoder.h"
#include "family/deepseek_v41/model.h"

namespace dsv4::cli {

// The tower for `model` on `backend`: an engine::VisionTower giving one image's aligner rows (bf16 [llm_h * llm_w, D],
// row-major over the aligner grid) from its pixel patches, built from the model's vision weights (vision.*,
// aligner.*): the CPU oracle's tower (ref64 when the oracle runs ref64), on the host for the CUDA backend too.
// `unavailable` ("vision tower not available: ...") when the model has no vision config or its vision tensors do not bind.
StatusOr<std::unique_ptr<engine::VisionTower>> make_vision_tower(const std::shared_ptr<const family::Model>& model,
                                                                 const BackendChoice& backend);

}  // namespace dsv4::cli
