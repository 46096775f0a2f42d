// The token span of one image in a V4.1 prompt (model-spec.md §3.10): the aligner's grid of a ViT patch grid
// and which row of the span holds what. Every row of the span carries image_token_id in the prompt.
#pragma once

#include <cstdint>
#include <vector>

namespace dsv4::family {

// What one row of an image span is: a learned delimiter vector or the next aligner row.
enum class ImageRow : uint8_t { start, image, newline, end };

// The aligner's grid (image rows per span row, span rows): the ViT grid padded up to multiples of the
// downsample ratio r, one aligner row per r x r block.
struct AlignerGrid {
  int64_t h = 0, w = 0;
  int64_t cells() const { return h * w; }
};
AlignerGrid aligner_grid(int64_t vit_h, int64_t vit_w, int32_t ratio);  // ceil(vit_h / r) x ceil(vit_w / r)

// h·(w + 1) + 2: start, then per grid row its w image rows and one newline, then end.
int64_t image_span_rows(AlignerGrid g);
// The kinds of the span's rows in that order; the image rows take the aligner rows in row-major order.
std::vector<ImageRow> image_span_layout(AlignerGrid g);

}  // namespace dsv4::family
