// What the device vision tower (model-spec.md §3.10) holds on its GPU, computed on the host before anything is
// allocated: its weights as uploaded and the scratch of one encode call. The CUDA tower carves its scratch from
// this layout, so the memory plan and the tower agree by construction.
#pragma once

#include <cstdint>

#include "family/deepseek_v41/config.h"

namespace dsv4::engine {

// Patch features as uploaded: 3·p² rounded up to a multiple of 8 (the bf16 tensor-core linears read rows of
// 16-byte units; the padding columns of weights and patches are zero, so the sums are unchanged).
int64_t vision_patch_width(const family::VisionConfig& vc);

// The largest image the processor produces: r²·(max_image_tokens − 2) ViT patches and max_image_tokens − 2
// aligner rows (a span of h·(w + 1) + 2 positions holds at most max_image_tokens − 2 aligner rows).
int64_t max_image_patches(const family::VisionConfig& vc);
int64_t max_image_cells(const family::VisionConfig& vc);

// The tower's weights on the device (D = the text model's hidden size): every ViT and aligner tensor in bf16
// as stored (patch_embed padded to vision_patch_width), each allocation rounded up to 256 bytes. The image
// delimiters stay on the host.
int64_t vision_weight_bytes(const family::VisionConfig& vc, int64_t D);

// Byte offsets of one call's scratch for `patches` ViT rows and `cells` aligner rows (all images of the call
// together), each buffer 256-byte aligned. f32 buffers hold bf16 values unless noted.
struct VisionScratch {
  int64_t x = 0;        // f32 [patches, V]: the residual
  int64_t h = 0;        // f32 [patches, V]: a norm's output, the attention output, a branch's output
  int64_t wide = 0;     // f32 [patches, max(3V, 2I, patch width)]: linear sums, the MLP's gate|up, the patches
  int64_t mlp = 0;      // f32 [patches, I]: the SwiGLU product
  int64_t qkv = 0;      // bf16 [3, patches, V]: q, k, v after the bias and the rotation
  int64_t rope = 0;     // f32 [patches, 32, 2]: cos, sin per patch
  int64_t pixels = 0;   // bf16 [patches, patch width]: the uploaded patches
  int64_t unfold = 0;   // f32 [cells, V·r²]: the aligner's input
  int64_t hidden = 0;   // f32 [cells, D]: the first aligner linear's sums, then its GELU output
  int64_t sums = 0;     // f32 [cells, D]: the second aligner linear's sums (fp32, before the bias)
  int64_t out = 0;      // bf16 [cells, D]: the aligner rows
  int64_t total = 0;    // bytes
};
VisionScratch vision_scratch(const family::VisionConfig& vc, int64_t D, int64_t patches, int64_t cells);

// Weights plus the scratch of one call holding the largest image: what the memory plan reserves.
int64_t vision_device_bytes(const family::VisionConfig& vc, int64_t D);

}  // namespace dsv4::engine
