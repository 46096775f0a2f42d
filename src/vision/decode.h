// Image bytes -> 8-bit RGB: format detected by magic bytes, checked against the declared MIME type, size
// limits enforced before any pixel memory is allocated.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "core/status.h"
#include "vision/image.h"

namespace dsv4::vision {

// Decodes PNG, JPEG, WebP or GIF (first frame) into RGB the way the reference's
// `PIL.Image.open(...).convert("RGB")` does (docs/vision.md "Decoding"). `declared_mime` is the type the
// client named (data URL or Content-Type); empty means "not declared". Errors (invalid_argument):
// empty input, input over limits.max_encoded_bytes, unknown signature, a declared type that names another
// format (or no image format), zero width or height, width*height over limits.max_pixels, and corrupt or
// truncated data (the decoding library's message is quoted).
StatusOr<Image> decode_image(std::span<const uint8_t> bytes, std::string_view declared_mime,
                             const DecodeLimits& limits = {});

// The same with the format already known (no MIME check); what decode_image dispatches to.
StatusOr<Image> decode_as(ImageFormat format, std::span<const uint8_t> bytes, const DecodeLimits& limits);

}  // namespace dsv4::vision
