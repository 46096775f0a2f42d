// The server's image side for a model (see image_side.h).
#include "cli/image_side.h"

namespace dsv4::cli {

server::ImageSide make_image_side(const family::Model& model, StatusOr<std::unique_ptr<engine::VisionTower>> tower) {
  server::ImageSide side;
  const family::Config& c = model.config;
  if (!c.vision.has_value() || !c.image_token_id.has_value()) {
    side.unavailable = "the checkpoint has no vision_config (a text-only model, such as DeepSeek-V4-Flash-0731)";
    return side;
  }
  StatusOr<engine::ImageDelimiters> delimiters = engine::image_delimiters(model);
  if (!delimiters.ok()) {
    side.unavailable = "the checkpoint has no vision weights: " + delimiters.status().message();
    return side;
  }
  side.accepts_images = true;
  side.config = *c.vision;
  side.image_token_id = static_cast<int32_t>(*c.image_token_id);
  side.embed_dim = model.plan.dim;
  if (!tower.ok()) {
    side.unavailable = tower.status().message();
    return side;
  }
  StatusOr<std::unique_ptr<engine::ImageEncoder>> encoder =
      engine::ImageEncoder::create(std::move(delimiters).value(), std::move(tower).value(), model.plan.dim);
  if (!encoder.ok()) {
    side.unavailable = "the image encoder: " + encoder.status().message();
    return side;
  }
  std::shared_ptr<const engine::ImageEncoder> e = std::move(encoder).value();
  side.encode = [e](const vision::PixelPatches& p) -> StatusOr<server::EncodedImage> {
    DSV4_ASSIGN_OR_RETURN(engine::ImageSpanRows rows, e->encode(p));
    return server::EncodedImage{rows.rows, std::make_shared<const std::vector<uint16_t>>(std::move(rows.values))};
  };
  return side;
}

}  // namespace dsv4::cli
