// A decoded image as the vision front end sees it: 8-bit RGB, row-major, plus the limits decoding obeys.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace dsv4::vision {

enum class ImageFormat : uint8_t { png, jpeg, webp, gif };

std::string_view format_name(ImageFormat f);  // "PNG", "JPEG", "WebP", "GIF"
std::string_view format_mime(ImageFormat f);  // "image/png", "image/jpeg", "image/webp", "image/gif"

// Pixels after the reference's PIL `.convert("RGB")`: alpha dropped (not composited), palette looked up,
// grey replicated. Invariant: rgb.size() == width * height * 3.
struct Image {
  int32_t width = 0;
  int32_t height = 0;
  std::vector<uint8_t> rgb;  // u8 [height, width, 3]

  uint8_t at(int32_t y, int32_t x, int c) const { return rgb[(static_cast<size_t>(y) * width + x) * 3 + c]; }
};

// What decoding refuses before it allocates pixels. The defaults match PIL's own refusal threshold
// (Image.MAX_IMAGE_PIXELS * 2, its DecompressionBombError) and a 20 MiB encoded image.
struct DecodeLimits {
  int64_t max_pixels = 178'956'970;        // declared width * height
  int64_t max_encoded_bytes = 20 << 20;    // size of the compressed file
};

}  // namespace dsv4::vision
