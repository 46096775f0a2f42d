// The image span layout (see image_span.h).
#include "family/deepseek_v41/image_span.h"

#include <cstddef>

namespace dsv4::family {

AlignerGrid aligner_grid(int64_t vit_h, int64_t vit_w, int32_t ratio) {
  return {(vit_h + ratio - 1) / ratio, (vit_w + ratio - 1) / ratio};
}

int64_t image_span_rows(AlignerGrid g) { return g.h * (g.w + 1) + 2; }

std::vector<ImageRow> image_span_layout(AlignerGrid g) {
  std::vector<ImageRow> rows;
  rows.reserve(static_cast<size_t>(image_span_rows(g)));
  rows.push_back(ImageRow::start);
  for (int64_t i = 0; i < g.h; ++i) {
    rows.insert(rows.end(), static_cast<size_t>(g.w), ImageRow::image);
    rows.push_back(ImageRow::newline);
  }
  rows.push_back(ImageRow::end);
  return rows;
}

}  // namespace dsv4::family
