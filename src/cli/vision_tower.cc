// The vision tower of each backend (see vision_tower.h): the CPU oracle's tower and aligner (backends/cpu/vision.h)
// on the model's vision weights, for both backends. The CUDA backend has no device tower yet; its images are encoded
// on the host with the oracle's ref32 tower, whose rows the device then takes as given embedding rows.
#include "cli/vision_tower.h"

#include "backends/cpu/vision.h"
#include "core/bf16.h"
#include "core/thread_pool.h"
#include "family/deepseek_v41/vision_weights.h"

namespace dsv4::cli {
namespace {

class OracleVisionTower final : public engine::VisionTower {
 public:
  OracleVisionTower(std::shared_ptr<const family::Model> model, family::VisionWeights weights, cpu::Precision precision,
                    int threads)
      : model_(std::move(model)), weights_(std::move(weights)), pool_(threads) {
    options_.precision = precision;
  }

  StatusOr<std::vector<uint16_t>> aligner_rows(const vision::PixelPatches& p) override {
    cpu::ImagePatches in;
    in.grid_h = p.grid_h;
    in.grid_w = p.grid_w;
    in.patches.resize(p.patches.size());
    bf16_to_f32(p.patches, in.patches);  // bf16 values: exact in f32
    DSV4_ASSIGN_OR_RETURN(cpu::ImageEmbedding e, cpu::encode_image(pool_, weights_, in, options_));
    std::vector<uint16_t> rows(e.aligner.size());
    f32_to_bf16(e.aligner, rows);  // the aligner's rows are bf16 values: exact
    return rows;
  }

 private:
  std::shared_ptr<const family::Model> model_;  // the checkpoint's mapped bytes the weights view
  family::VisionWeights weights_;
  ThreadPool pool_;
  cpu::VisionOptions options_;
};

}  // namespace

StatusOr<std::unique_ptr<engine::VisionTower>> make_vision_tower(const std::shared_ptr<const family::Model>& model,
                                                                 const BackendChoice& backend) {
  if (!model->config.vision)
    return error(StatusCode::unavailable, "vision tower not available: the model has no vision_config");
  auto weights = family::bind_vision_weights(*model);
  if (!weights.ok())
    return error(StatusCode::unavailable, "vision tower not available: {}", weights.status().message());
  const bool oracle = backend.name == "cpu";
  const cpu::Precision precision = oracle && backend.ref64 ? cpu::Precision::ref64 : cpu::Precision::ref32;
  return std::unique_ptr<engine::VisionTower>(
      new OracleVisionTower(model, *std::move(weights), precision, oracle ? backend.threads : 0));
}

}  // namespace dsv4::cli
