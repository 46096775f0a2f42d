// The token span an image becomes in the prompt, and the role of each position in it.
#pragma once

#include <cstdint>
#include <vector>

namespace dsv4::vision {

// Per-position roles, numbered as the reference's token_types (TEXT = -1 outside image spans).
enum class SpanRole : int8_t { text = -1, image_start = 0, image = 1, image_newline = 2, image_end = 3 };

// [image_start] + ([image] * llm_w + [image_newline]) * llm_h + [image_end]: num_image_tokens(llm_h, llm_w)
// roles. Every position carries token id image_token_id (129264) in the prompt; the k-th `image` position
// (k counted over the span) takes aligner row k (row-major over the llm grid), the others take the learned
// image_start / image_newline / image_end vectors.
std::vector<SpanRole> image_span_roles(int32_t llm_h, int32_t llm_w);

}  // namespace dsv4::vision
