// Image format detection by magic bytes, and the MIME types each format answers to.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "vision/image.h"

namespace dsv4::vision {

// The format whose signature starts `bytes`: PNG "\x89PNG\r\n\x1a\n", JPEG FF D8 FF, WebP "RIFF"....
// "WEBP", GIF "GIF87a"/"GIF89a". nullopt for anything else.
std::optional<ImageFormat> sniff_format(std::span<const uint8_t> bytes);

// The format a declared MIME type names ("image/png", "image/jpeg" or "image/jpg", "image/webp",
// "image/gif"; case-insensitive, parameters after ';' ignored). nullopt for any other type.
std::optional<ImageFormat> format_from_mime(std::string_view mime);

}  // namespace dsv4::vision
