// The vision tower and aligner on CUDA (model-spec.md §3.10): images' bf16 pixel patches to their aligner rows,
// following the CPU oracle's op order and bf16 rounding points (backends/cpu/vision.h, ref32). The linears run
// on tensor cores (kernels/linear bf16_linear, f32 accumulation), attention per image on tensor cores
// (vision_kernels.cuh). Batch-invariant: the images of one call share the linears' launches, whose every output
// element depends on its own row alone, and everything else runs per row or per image, so an image's rows are
// the same bits alone or beside any other images, in any position.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "backends/cuda/runtime/device_buffer.h"
#include "backends/cuda/runtime/stream.h"
#include "backends/cuda/vision/vision_weights.h"
#include "core/status.h"
#include "family/deepseek_v41/vision_weights.h"

namespace dsv4::cuda {

// One image: bf16 [grid_h·grid_w, 3·p²] normalized pixels, patch (i, j) at row i·grid_w + j, element c·p² + y·p + x
// (vision::PixelPatches::patches).
struct VisionImage {
  std::span<const uint16_t> patches;
  int64_t grid_h = 0, grid_w = 0;
};

// Intermediate values of image `image` under the oracle's probe names (cpu::VisionProbe): "patch_embed",
// "block_NN", "vit_norm" [n, V], "aligner_hidden", "aligner" [m, D]; bf16 values as f32.
using VisionDeviceProbe = std::function<void(const std::string& name, size_t image, int64_t rows, int64_t cols,
                                             const std::vector<float>& values)>;

class VisionTowerDevice {
 public:
  // Uploads `w`'s tensors to `device` (the views may be dropped afterwards).
  static StatusOr<std::unique_ptr<VisionTowerDevice>> create(const family::VisionWeights& w, int device);

  // Each image's aligner rows, bf16 [ceil(grid_h/r)·ceil(grid_w/r), D], row-major over its aligner grid. All images
  // run in one pass; the scratch grows to the call's rows (engine::vision_scratch) and is kept. invalid_argument
  // naming the image for a bad grid or patch count. Calls run one at a time.
  StatusOr<std::vector<std::vector<uint16_t>>> encode(std::span<const VisionImage> images,
                                                      const VisionDeviceProbe& probe = {});

  int device() const { return device_; }
  const family::VisionConfig& config() const { return w_.config; }
  int64_t hidden() const { return w_.hidden; }
  int64_t weight_bytes() const { return w_.bytes(); }
  int64_t scratch_bytes() const { return static_cast<int64_t>(scratch_.bytes()); }

 private:
  VisionTowerDevice() = default;
  Status run(std::span<const VisionImage> images, const VisionDeviceProbe& probe);

  int device_ = 0;
  VisionDeviceWeights w_;
  Stream stream_;
  DeviceBuffer scratch_;
  std::mutex mu_;
};

}  // namespace dsv4::cuda
