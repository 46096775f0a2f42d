// Image -> the ViT's input: the planned canvas (resized with PIL's bicubic, grey padding), scaled to
// [-1, 1] in bf16 and cut into patches in the order the patch embedding reads them.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "family/deepseek_v41/config.h"
#include "vision/image.h"
#include "vision/plan.h"

namespace dsv4::vision {

struct PixelPatches {
  int32_t grid_h = 0, grid_w = 0;  // ViT patch grid (rows, columns); n_patches = grid_h * grid_w
  int32_t llm_h = 0, llm_w = 0;    // aligner grid: ceil(grid / downsample_ratio); llm_h * llm_w aligner rows
  int32_t n_tokens = 0;            // the image's span in the prompt: llm_h * (llm_w + 1) + 2
  int32_t patch_dim = 0;           // 3 * patch_size^2
  // bf16 [grid_h * grid_w, 3 * p * p]: patch (gy, gx) is row gy * grid_w + gx; inside a row, feature
  // c * p * p + ky * p + kx holds channel c (R, G, B) of canvas pixel (gy * p + ky, gx * p + kx), as
  // bf16((v / 255 - 0.5) / 0.5) computed in fp32 (v the u8 sample).
  std::vector<uint16_t> patches;
  ImagePlan plan;
};

// The canvas of `plan`: u8 RGB [canvas_height, canvas_width, 3], the reference's PIL image just before it
// becomes a tensor.
Image render_canvas(const Image& image, const ImagePlan& plan);

// bf16((v / 255 - 0.5) / 0.5) in fp32 for each u8 v: the reference's rescale and normalisation
// (mean 0.5, std 0.5 on every channel).
uint16_t normalize_sample(uint8_t v);

// Cuts a canvas into patches (layout above); canvas sides must be multiples of patch_size.
std::vector<uint16_t> patchify(const Image& canvas, int32_t patch_size);

// Plan, render, normalise and patchify: what the vision tower consumes for one image.
StatusOr<PixelPatches> preprocess(const Image& image, const family::VisionConfig& config);

}  // namespace dsv4::vision
