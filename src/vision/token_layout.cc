// Image span layout: start, rows of image tokens each closed by a newline, end.
#include "vision/token_layout.h"

#include <cstddef>

namespace dsv4::vision {

std::vector<SpanRole> image_span_roles(int32_t llm_h, int32_t llm_w) {
  std::vector<SpanRole> roles;
  roles.reserve(static_cast<size_t>(llm_h) * (llm_w + 1) + 2);
  roles.push_back(SpanRole::image_start);
  for (int32_t y = 0; y < llm_h; ++y) {
    roles.insert(roles.end(), llm_w, SpanRole::image);
    roles.push_back(SpanRole::image_newline);
  }
  roles.push_back(SpanRole::image_end);
  return roles;
}

}  // namespace dsv4::vision
