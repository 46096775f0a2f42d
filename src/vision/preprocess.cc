// Canvas rendering (resize + pad or stretch), normalisation to bf16 and the patch layout.
#include "vision/preprocess.h"

#include <array>
#include <cstring>

#include "core/bf16.h"
#include "vision/resample.h"

namespace dsv4::vision {

Image render_canvas(const Image& image, const ImagePlan& plan) {
  const Image content = (plan.content_width == image.width && plan.content_height == image.height)
                            ? image
                            : resize_bicubic(image, plan.content_width, plan.content_height);
  if (plan.content_width == plan.canvas_width && plan.content_height == plan.canvas_height) return content;
  Image canvas;
  canvas.width = plan.canvas_width;
  canvas.height = plan.canvas_height;
  canvas.rgb.assign(static_cast<size_t>(canvas.width) * canvas.height * 3, 127);  // the reference's pad colour
  for (int32_t y = 0; y < content.height; ++y) {
    std::memcpy(&canvas.rgb[(static_cast<size_t>(y + plan.content_y) * canvas.width + plan.content_x) * 3],
                &content.rgb[static_cast<size_t>(y) * content.width * 3], static_cast<size_t>(content.width) * 3);
  }
  return canvas;
}

uint16_t normalize_sample(uint8_t v) {
  const float x = static_cast<float>(v) / 255.0f;
  return f32_to_bf16((x - 0.5f) / 0.5f);
}

std::vector<uint16_t> patchify(const Image& canvas, int32_t p) {
  DSV4_CHECK(p > 0 && canvas.width % p == 0 && canvas.height % p == 0);
  std::array<uint16_t, 256> lut;
  for (int v = 0; v < 256; ++v) lut[v] = normalize_sample(static_cast<uint8_t>(v));
  const int32_t gh = canvas.height / p, gw = canvas.width / p;
  const size_t dim = static_cast<size_t>(3) * p * p;
  std::vector<uint16_t> out(static_cast<size_t>(gh) * gw * dim);
  for (int32_t gy = 0; gy < gh; ++gy) {
    for (int32_t gx = 0; gx < gw; ++gx) {
      uint16_t* patch = &out[(static_cast<size_t>(gy) * gw + gx) * dim];
      for (int c = 0; c < 3; ++c)
        for (int32_t ky = 0; ky < p; ++ky)
          for (int32_t kx = 0; kx < p; ++kx)
            patch[(static_cast<size_t>(c) * p + ky) * p + kx] = lut[canvas.at(gy * p + ky, gx * p + kx, c)];
    }
  }
  return out;
}

StatusOr<PixelPatches> preprocess(const Image& image, const family::VisionConfig& config) {
  if (image.width <= 0 || image.height <= 0 || image.rgb.size() != static_cast<size_t>(image.width) * image.height * 3) {
    return error(StatusCode::invalid_argument, "image {}x{} with {} bytes is not a valid RGB image", image.width,
                 image.height, image.rgb.size());
  }
  DSV4_ASSIGN_OR_RETURN(ImagePlan plan, plan_image(image.width, image.height, config));
  PixelPatches out;
  out.grid_h = plan.grid_h, out.grid_w = plan.grid_w;
  out.llm_h = plan.llm_h, out.llm_w = plan.llm_w;
  out.n_tokens = plan.n_tokens;
  out.patch_dim = 3 * config.patch_size * config.patch_size;
  out.patches = patchify(render_canvas(image, plan), config.patch_size);
  out.plan = plan;
  return out;
}

}  // namespace dsv4::vision
