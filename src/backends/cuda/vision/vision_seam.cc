// The CUDA vision tower behind the engine's image seam (see vision_seam.h).
#include "backends/cuda/vision/vision_seam.h"

#include "family/deepseek_v41/vision_weights.h"

namespace dsv4::cuda {
namespace {

class DeviceVisionTower final : public engine::VisionTower {
 public:
  explicit DeviceVisionTower(std::shared_ptr<VisionTowerDevice> t) : tower_(std::move(t)) {}

  StatusOr<std::vector<uint16_t>> aligner_rows(const vision::PixelPatches& p) override {
    const VisionImage image{p.patches, p.grid_h, p.grid_w};
    DSV4_ASSIGN_OR_RETURN(std::vector<std::vector<uint16_t>> rows, tower_->encode(std::span(&image, 1)));
    return std::move(rows[0]);
  }

 private:
  std::shared_ptr<VisionTowerDevice> tower_;
};

}  // namespace

std::unique_ptr<engine::VisionTower> vision_tower_seam(std::shared_ptr<VisionTowerDevice> tower) {
  return std::make_unique<DeviceVisionTower>(std::move(tower));
}

StatusOr<std::unique_ptr<engine::VisionTower>> make_vision_tower(const family::Model& model, int device) {
  if (!model.config.vision)
    return error(StatusCode::unavailable, "vision tower not available: the model has no vision_config");
  auto weights = family::bind_vision_weights(model);
  if (!weights.ok())
    return error(StatusCode::unavailable, "vision tower not available: {}", weights.status().message());
  auto tower = VisionTowerDevice::create(*weights, device);
  if (!tower.ok())
    return error(StatusCode::unavailable, "vision tower not available: on the device: {}",
                 tower.status().message());
  return vision_tower_seam(std::shared_ptr<VisionTowerDevice>(std::move(*tower)));
}

}  // namespace dsv4::cuda
