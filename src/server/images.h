// The image stage of a chat request: each image_url loaded (a data: URL, or fetched when the operator allows it),
// decoded, checked and preprocessed; the request's span positions counted against the limit; each image encoded;
// each image token of the prompt expanded into the image's span. Errors are 400s naming the content part.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "server/api_error.h"
#include "server/engine.h"
#include "server/image_side.h"
#include "server/text_side.h"

namespace dsv4::server {

// Loads and encodes `images` (in prompt order) and replaces the k-th image token among g.prompt[0, rendered_end) by
// the k-th image's span, filling g.images. On failure, false with `err`: 400 naming the content part (bad URL or
// bytes, fetching off, too large, a decompression bomb, an extreme aspect ratio), 400 on "messages" past
// max_image_tokens, 400 with side.unavailable once the images are checked, or the encoder's error.
bool expand_images(const ImageSide& side, const ImageOptions& options, const std::vector<ChatImage>& images,
                   size_t rendered_end, GenerationRequest& g, ApiError& err);

// SHA-256 of an image's pixel patches and grid (its identity in the prompt cache).
std::array<uint8_t, 32> patches_digest(const vision::PixelPatches& p);

}  // namespace dsv4::server
