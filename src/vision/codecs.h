// One decoder per format (decode_png.cc, decode_jpeg.cc, decode_webp.cc, decode_gif.cc) and the checks
// they share; internal to src/vision.
#pragma once

#include <cstdint>
#include <span>

#include "core/status.h"
#include "vision/image.h"

namespace dsv4::vision::detail {

StatusOr<Image> decode_png(std::span<const uint8_t> bytes, const DecodeLimits& limits);
StatusOr<Image> decode_jpeg(std::span<const uint8_t> bytes, const DecodeLimits& limits);
StatusOr<Image> decode_webp(std::span<const uint8_t> bytes, const DecodeLimits& limits);
StatusOr<Image> decode_gif(std::span<const uint8_t> bytes, const DecodeLimits& limits);

// The declared size, checked before allocation: zero sides and width*height over the limit are refused.
Status check_dimensions(ImageFormat format, int64_t width, int64_t height, const DecodeLimits& limits);

// A zeroed image of the checked size.
Image blank_image(int32_t width, int32_t height);

}  // namespace dsv4::vision::detail
