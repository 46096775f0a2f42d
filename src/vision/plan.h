// The resize plan of one image: the pixel canvas, the ViT patch grid, the LLM token grid after the 3x3
// aligner, and where the resized picture sits on the canvas. A pure function of (width, height, config).
#pragma once

#include <cstdint>

#include "core/status.h"
#include "family/deepseek_v41/config.h"

namespace dsv4::vision {

enum class Fit : uint8_t {
  pad,      // aspect kept: resized to fit inside the canvas, centred, the rest grey (127, 127, 127)
  stretch,  // resized to the whole canvas (only when max_wh_ratio is set and the image is that wide)
};

struct ImagePlan {
  int32_t width = 0, height = 0;                // the decoded image
  int32_t canvas_width = 0, canvas_height = 0;  // multiples of patch_size
  int32_t grid_h = 0, grid_w = 0;               // ViT patches: canvas / patch_size
  int32_t llm_h = 0, llm_w = 0;                 // aligner rows: ceil(grid / downsample_ratio)
  int32_t n_tokens = 0;                         // the span: family::image_span_rows of the llm grid
  Fit fit = Fit::pad;
  // The resized picture on the canvas (the whole canvas for stretch).
  int32_t content_x = 0, content_y = 0, content_width = 0, content_height = 0;
};

// Follows the reference processor (docs/vision.md "Resize rules"), in double precision like its Python:
//  1. w, h = width, height; if max_wh_ratio is set and w > h * max_wh_ratio: w = h * max_wh_ratio.
//  2. If 0 < w * h < min_pixels: r = (min_pixels / (w * h)) ** 0.5; w = int(w * r); h = int(h * r).
//  3. canvas = ceil(w / p) * p by ceil(h / p) * p; llm grid = ceil((canvas / p) / downsample_ratio).
//  4. If llm_h * (llm_w + 1) + 2 > max_image_tokens, the canvas shrinks to the largest aspect-preserving
//     size that fits (a single column / row for extreme aspect ratios).
//  5. Fit: stretch when max_wh_ratio is set and width >= max_wh_ratio * height, else pad: PIL's
//     ImageOps.pad (contain: one side fills the canvas, the other is round(other * scale), half to even;
//     offset round(slack / 2), half to even).
// Errors (invalid_argument): a non-positive size; a config value the rules cannot use; an aspect ratio so
// extreme that a side of the resized picture would be 0 pixels (PIL refuses that resize too).
StatusOr<ImagePlan> plan_image(int32_t width, int32_t height, const family::VisionConfig& config);

}  // namespace dsv4::vision
