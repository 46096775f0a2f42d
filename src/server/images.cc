// Images of a chat request: load, check, preprocess, encode, expand (see images.h).
#include "server/images.h"

#include <fmt/format.h>

#include <cctype>

#include "core/sha256.h"
#include "vision/fetch/image_url.h"

namespace dsv4::server {
namespace {

bool is_http_url(const std::string& url) {
  std::string head;
  for (size_t i = 0; i < url.size() && i < 8; ++i) head += static_cast<char>(std::tolower(static_cast<unsigned char>(url[i])));
  return head.rfind("http://", 0) == 0 || head.rfind("https://", 0) == 0;
}

ApiError image_error(const std::string& param, const std::string& message, const char* code) {
  return bad_request(param, fmt::format("{}: {}", param, message), code);
}

}  // namespace

std::array<uint8_t, 32> patches_digest(const vision::PixelPatches& p) {
  Sha256 h;
  const std::string tag = "dsv4 image patches v1";
  h.update({reinterpret_cast<const uint8_t*>(tag.data()), tag.size()});
  const int32_t dims[3] = {p.grid_h, p.grid_w, p.patch_dim};
  h.update({reinterpret_cast<const uint8_t*>(dims), sizeof(dims)});
  h.update({reinterpret_cast<const uint8_t*>(p.patches.data()), p.patches.size() * 2});
  return h.finish();
}

bool expand_images(const ImageSide& side, const ImageOptions& options, const std::vector<ChatImage>& images,
                   size_t rendered_end, GenerationRequest& g, ApiError& err) {
  vision::ImageUrlOptions load;
  load.limits.max_encoded_bytes = options.max_image_bytes;
  load.limits.max_pixels = options.max_image_pixels;
  load.fetch.enabled = options.allow_urls;
  load.fetch.max_bytes = options.max_image_bytes;
  load.fetch.total_timeout = options.fetch_timeout;
  // 1. Every image loaded and preprocessed (the decoded pixels are dropped as soon as the patches exist).
  std::vector<vision::PixelPatches> patches;
  int64_t total = 0;
  for (const ChatImage& image : images) {
    if (!options.allow_urls && is_http_url(image.url))
      return err = image_error(image.param,
                               "this server does not fetch http(s) image URLs (it runs without --allow-image-urls); "
                               "send the image as a data: URL",
                               "image_url_not_allowed"),
             false;
    StatusOr<vision::Image> rgb = vision::load_image_url(image.url, load);
    if (!rgb.ok()) return err = image_error(image.param, rgb.status().message(), "invalid_image"), false;
    StatusOr<vision::PixelPatches> p = vision::preprocess(*rgb, side.config);
    if (!p.ok()) return err = image_error(image.param, p.status().message(), "invalid_image"), false;
    total += p->n_tokens;
    if (total > options.max_image_tokens)
      return err = bad_request("messages",
                               fmt::format("the request's images take more than {} prompt positions (this server's "
                                           "limit); {} ends at {}",
                                           options.max_image_tokens, image.param, total),
                               "too_many_image_tokens"),
             false;
    patches.push_back(std::move(p).value());
  }
  if (!side.ready()) {
    const std::string& param = images.empty() ? std::string("messages") : images.front().param;
    return err = bad_request(param, side.unavailable.empty() ? "images cannot be served" : side.unavailable,
                             "vision_unavailable"),
           false;
  }
  // 2. The placeholders: exactly one image token per image in the rendered prompt.
  std::vector<size_t> at;
  for (size_t i = 0; i < rendered_end && i < g.prompt.size(); ++i)
    if (g.prompt[i] == side.image_token_id) at.push_back(i);
  if (at.size() != images.size())
    return err = bad_request("messages",
                             fmt::format("the prompt holds {} image tokens for {} images (write images as image_url "
                                         "parts, not as text)",
                                         at.size(), images.size())),
           false;
  // 3. Encode each image and splice its span in.
  std::vector<int32_t> prompt;
  prompt.reserve(g.prompt.size() + static_cast<size_t>(total));
  size_t from = 0;
  for (size_t k = 0; k < images.size(); ++k) {
    StatusOr<EncodedImage> rows = side.encode(patches[k]);
    if (!rows.ok()) return err = error_from_status(rows.status().with_context(images[k].param)), false;
    if (rows->rows != patches[k].n_tokens || rows->values == nullptr ||
        static_cast<int64_t>(rows->values->size()) != rows->rows * side.embed_dim)
      return err = error_from_status(error(StatusCode::internal, "{}: the image encoder returned {} rows for a span of {}",
                                           images[k].param, rows->rows, patches[k].n_tokens)),
             false;
    prompt.insert(prompt.end(), g.prompt.begin() + static_cast<ptrdiff_t>(from), g.prompt.begin() + static_cast<ptrdiff_t>(at[k]));
    PromptImage span;
    span.start = static_cast<int64_t>(prompt.size());
    span.rows = rows->rows;
    span.embeds = rows->values;
    span.digest = patches_digest(patches[k]);
    prompt.insert(prompt.end(), static_cast<size_t>(span.rows), side.image_token_id);
    g.images.push_back(std::move(span));
    from = at[k] + 1;
  }
  prompt.insert(prompt.end(), g.prompt.begin() + static_cast<ptrdiff_t>(from), g.prompt.end());
  g.prompt = std::move(prompt);
  return true;
}

}  // namespace dsv4::server
