// The vision tower of each backend (see vision_tower.h).
#include "cli/vision_tower.h"

namespace dsv4::cli {

StatusOr<std::unique_ptr<engine::VisionTower>> make_vision_tower(const std::shared_ptr<const family::Model>& model,
                                                                 const BackendChoice& backend) {
  (void)model;
  return error(StatusCode::unavailable,
               "vision tower not available: this build of dsv4 has no vision tower for the {} backend, so images "
               "cannot be encoded yet",
               backend.name);
}

}  // namespace dsv4::cli
