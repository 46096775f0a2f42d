// The CPU oracle's vision tower and aligner (model-spec.md §3.10): one image's normalized pixel patches to the
// rows its span puts into the prompt, in ref32 (float accumulation) or ref64 (double), with the reference's
// bf16 rounding points (docs/cpu-oracle.md "Vision"). Each image is computed alone: its rows never depend on
// the other images of a call.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backends/cpu/forward.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "family/deepseek_v41/image_span.h"
#include "family/deepseek_v41/vision_weights.h"

namespace dsv4::cpu {

// Intermediate outputs of one image, as bf16 values [rows, cols]: "patch_embed" [n, V], "block_NN" (the ViT
// residual after block NN, two digits) [n, V], "vit_norm" (the final norm) [n, V], "aligner_hidden" (after the
// GELU) [m, D], "aligner" [m, D]; n = patches, m = aligner rows.
using VisionProbe =
    std::function<void(const std::string& name, int64_t rows, int64_t cols, const std::vector<float>& values)>;

struct VisionOptions {
  Precision precision = Precision::ref32;
  VisionProbe probe;  // empty: nothing is copied
};

// One image's ViT input: grid_h x grid_w patches of p x p pixels (p = patch_size), normalized as the
// reference's preprocessing does ((x / 255 - 0.5) / 0.5). Patch (i, j) is row i·grid_w + j; within a row,
// element c·p² + y·p + x (channel, pixel row, pixel column). The reference holds patches in bf16: values are
// rounded to bf16 on entry (a caller passing bf16 values loses nothing).
struct ImagePatches {
  std::vector<float> patches;  // f32 [grid_h·grid_w, 3·p·p]
  int64_t grid_h = 0, grid_w = 0;
};

// What one image contributes to the prompt (bf16 values, D = the text model's hidden size).
struct ImageEmbedding {
  family::AlignerGrid grid;    // ceil(grid_h / r) x ceil(grid_w / r)
  std::vector<float> aligner;  // [grid.h·grid.w, D]: the aligner rows, row-major over its grid
  // [image_span_rows(grid), D]: the whole span in token order (family::image_span_layout): image_start, then
  // per grid row its aligner rows and image_newline, then image_end.
  std::vector<float> span;
};

// One image through the ViT and the aligner. invalid_argument naming the problem when the patch count or width
// does not match the grid and the model's patch size.
StatusOr<ImageEmbedding> encode_image(ThreadPool& pool, const family::VisionWeights& w, const ImagePatches& image,
                                      const VisionOptions& options = {});

// Several images, each computed alone (the same rows as encoding it by itself, bit for bit).
StatusOr<std::vector<ImageEmbedding>> encode_images(ThreadPool& pool, const family::VisionWeights& w,
                                                    const std::vector<ImagePatches>& images,
                                                    const VisionOptions& options = {});

}  // namespace dsv4::cpu
