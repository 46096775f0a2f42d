// What the server is given to read images in chat messages: whether the model reads them, its preprocessing sizes
// and image token, the request limits, and the encoder that turns one image's pixel patches into its span's rows.
//
// The server never links model code: src/cli builds an ImageSide from the model and its backend (the engine's
// ImageEncoder); tests build one around a test encoder.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "family/deepseek_v41/config.h"
#include "vision/preprocess.h"

namespace dsv4::server {

// Limits on a request's images (serve flags --max-images ... --image-fetch-timeout).
struct ImageOptions {
  int32_t max_images = 8;                  // image_url parts per request
  int64_t max_image_tokens = 8192;         // span positions of all of a request's images together
  int64_t max_image_bytes = 20 << 20;      // encoded bytes of one image (a data: payload or a fetched body)
  int64_t max_image_pixels = 178956970;    // declared width x height of one image (a decompression bomb above)
  bool allow_urls = false;                 // fetch http(s) image URLs (public addresses only, no redirects)
  std::chrono::milliseconds fetch_timeout{15000};  // one fetch, from connecting to the last byte
};

// One image's span rows: bf16 [rows, embed_dim] in span order.
struct EncodedImage {
  int64_t rows = 0;
  std::shared_ptr<const std::vector<uint16_t>> values;
};

struct ImageSide {
  // The model reads images (V4.1 with its vision weights). false: any image is refused at once with `unavailable`.
  bool accepts_images = false;
  // Why images cannot be served now ("" = they can). With accepts_images, images are still loaded and checked
  // (a bad image gets its own error) and then refused with this.
  std::string unavailable;
  family::VisionConfig config;  // the model's vision_config (the processor's sizes)
  int32_t image_token_id = -1;  // the token each span position carries
  int64_t embed_dim = 0;        // width of the span rows (the model's hidden size)
  // One image's pixel patches to its span's rows (called on request threads).
  std::function<StatusOr<EncodedImage>(const vision::PixelPatches&)> encode;

  bool ready() const { return accepts_images && unavailable.empty() && static_cast<bool>(encode); }
};

}  // namespace dsv4::server
