// The CPU oracle's vision tower behind the engine's image seam (see vision_tower.h).
#include "backends/cpu/vision_tower.h"

#include "backends/cpu/vision.h"
#include "core/bf16.h"
#include "core/thread_pool.h"
#include "family/deepseek_v41/vision_weights.h"

namespace dsv4::cpu {
namespace {

class OracleVisionTower final : public engine::VisionTower {
 public:
  OracleVisionTower(std::shared_ptr<const family::Model> model, family::VisionWeights weights, Precision precision,
                    int threads)
      : model_(std::move(model)), weights_(std::move(weights)), pool_(threads) {
    options_.precision = precision;
  }

  StatusOr<std::vector<uint16_t>> aligner_rows(const vision::PixelPatches& p) override {
    ImagePatches in;
    in.grid_h = p.grid_h;
    in.grid_w = p.grid_w;
    in.patches.resize(p.patches.size());
    bf16_to_f32(p.patches, in.patches);  // bf16 values: exact in f32
    DSV4_ASSIGN_OR_RETURN(ImageEmbedding e, encode_image(pool_, weights_, in, options_));
    std::vector<uint16_t> rows(e.aligner.size());
    f32_to_bf16(e.aligner, rows);  // the aligner's rows are bf16 values: exact
    return rows;
  }

 private:
  std::shared_ptr<const family::Model> model_;  // the checkpoint's mapped bytes the weights view
  family::VisionWeights weights_;
  ThreadPool pool_;
  VisionOptions options_;
};

}  // namespace

StatusOr<std::unique_ptr<engine::VisionTower>> make_vision_tower(std::shared_ptr<const family::Model> model,
                                                                 Precision precision, int threads) {
  if (!model->config.vision)
    return error(StatusCode::unavailable, "vision tower not available: the model has no vision_config");
  auto weights = family::bind_vision_weights(*model);
  if (!weights.ok())
    return error(StatusCode::unavailable, "vision tower not available: {}", weights.status().message());
  return std::unique_ptr<engine::VisionTower>(
      new OracleVisionTower(std::move(model), *std::move(weights), precision, threads));
}

}  // namespace dsv4::cpu
