// Dispatch by magic bytes, the MIME cross-check and the shared size checks.
#include "vision/decode.h"

#include "vision/codecs.h"
#include "vision/sniff.h"

namespace dsv4::vision {

namespace detail {

Status check_dimensions(ImageFormat format, int64_t width, int64_t height, const DecodeLimits& limits) {
  if (width <= 0 || height <= 0) {
    return error(StatusCode::invalid_argument, "{} image has zero width or height ({}x{})", format_name(format),
                 width, height);
  }
  if (width * height > limits.max_pixels) {
    return error(StatusCode::invalid_argument,
                 "{} image declares {}x{} = {} pixels, over the limit of {} (refused before decoding: a "
                 "decompression bomb or simply too large)",
                 format_name(format), width, height, width * height, limits.max_pixels);
  }
  return ok_status();
}

Image blank_image(int32_t width, int32_t height) {
  Image im;
  im.width = width;
  im.height = height;
  im.rgb.assign(static_cast<size_t>(width) * height * 3, 0);
  return im;
}

}  // namespace detail

StatusOr<Image> decode_as(ImageFormat format, std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  switch (format) {
    case ImageFormat::png: return detail::decode_png(bytes, limits);
    case ImageFormat::jpeg: return detail::decode_jpeg(bytes, limits);
    case ImageFormat::webp: return detail::decode_webp(bytes, limits);
    case ImageFormat::gif: return detail::decode_gif(bytes, limits);
  }
  return error(StatusCode::internal, "unknown image format");
}

StatusOr<Image> decode_image(std::span<const uint8_t> bytes, std::string_view declared_mime,
                             const DecodeLimits& limits) {
  if (bytes.empty()) return error(StatusCode::invalid_argument, "image data is empty");
  if (static_cast<int64_t>(bytes.size()) > limits.max_encoded_bytes) {
    return error(StatusCode::invalid_argument, "image data is {} bytes, over the limit of {}", bytes.size(),
                 limits.max_encoded_bytes);
  }
  const std::optional<ImageFormat> found = sniff_format(bytes);
  if (!found) {
    return error(StatusCode::invalid_argument,
                 "image data is not PNG, JPEG, WebP or GIF (unrecognised signature; declared type '{}')",
                 declared_mime.empty() ? "none" : declared_mime);
  }
  if (!declared_mime.empty()) {
    const std::optional<ImageFormat> declared = format_from_mime(declared_mime);
    if (!declared) {
      return error(StatusCode::invalid_argument,
                   "declared type '{}' is not a supported image type (image/png, image/jpeg, image/webp, "
                   "image/gif); the data is {}",
                   declared_mime, format_name(*found));
    }
    if (*declared != *found) {
      return error(StatusCode::invalid_argument, "declared type '{}' does not match the data, which is {}",
                   declared_mime, format_name(*found));
    }
  }
  return decode_as(*found, bytes, limits);
}

}  // namespace dsv4::vision
