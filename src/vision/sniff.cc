// Magic-byte detection and MIME names of the supported image formats.
#include "vision/sniff.h"

#include <cstring>
#include <string>

namespace dsv4::vision {

std::string_view format_name(ImageFormat f) {
  switch (f) {
    case ImageFormat::png: return "PNG";
    case ImageFormat::jpeg: return "JPEG";
    case ImageFormat::webp: return "WebP";
    case ImageFormat::gif: return "GIF";
  }
  return "?";
}

std::string_view format_mime(ImageFormat f) {
  switch (f) {
    case ImageFormat::png: return "image/png";
    case ImageFormat::jpeg: return "image/jpeg";
    case ImageFormat::webp: return "image/webp";
    case ImageFormat::gif: return "image/gif";
  }
  return "?";
}

namespace {
bool starts_with(std::span<const uint8_t> b, size_t at, const char* sig, size_t n) {
  return b.size() >= at + n && std::memcmp(b.data() + at, sig, n) == 0;
}
}  // namespace

std::optional<ImageFormat> sniff_format(std::span<const uint8_t> b) {
  if (starts_with(b, 0, "\x89PNG\r\n\x1a\n", 8)) return ImageFormat::png;
  if (starts_with(b, 0, "\xFF\xD8\xFF", 3)) return ImageFormat::jpeg;
  if (starts_with(b, 0, "RIFF", 4) && starts_with(b, 8, "WEBP", 4)) return ImageFormat::webp;
  if (starts_with(b, 0, "GIF87a", 6) || starts_with(b, 0, "GIF89a", 6)) return ImageFormat::gif;
  return std::nullopt;
}

std::optional<ImageFormat> format_from_mime(std::string_view mime) {
  const size_t semi = mime.find(';');
  if (semi != std::string_view::npos) mime = mime.substr(0, semi);
  while (!mime.empty() && (mime.back() == ' ' || mime.back() == '\t')) mime.remove_suffix(1);
  while (!mime.empty() && (mime.front() == ' ' || mime.front() == '\t')) mime.remove_prefix(1);
  std::string lower(mime);
  for (char& c : lower) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (lower == "image/png") return ImageFormat::png;
  if (lower == "image/jpeg" || lower == "image/jpg") return ImageFormat::jpeg;
  if (lower == "image/webp") return ImageFormat::webp;
  if (lower == "image/gif") return ImageFormat::gif;
  return std::nullopt;
}

}  // namespace dsv4::vision
