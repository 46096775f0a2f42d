// RFC 2397 `data:` URLs as image_url values: the declared media type and the decoded payload.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace dsv4::vision {

struct DataUrl {
  std::string mime;            // lower-cased media type without parameters; "" when the URL names none
  bool base64 = false;         // ";base64" was given
  std::vector<uint8_t> bytes;  // the decoded payload
};

// Parses `data:[<mediatype>][;param=value]*[;base64],<data>`. Base64 payloads use the standard alphabet
// ('+', '/') or the URL-safe one ('-', '_'), '=' padding optional, ASCII whitespace skipped; other payloads
// are percent-decoded. Errors (invalid_argument) name the problem: not a data URL, no comma, an empty
// payload, a character outside the base64 alphabet (with its offset), misplaced padding, a dangling
// base64 digit, a bad %XX escape, a payload that decodes to more than max_bytes.
StatusOr<DataUrl> parse_data_url(std::string_view url, size_t max_bytes);

// Base64 alone, with the rules above; `what` names the input in errors.
StatusOr<std::vector<uint8_t>> decode_base64(std::string_view text, size_t max_bytes, std::string_view what = "base64");

}  // namespace dsv4::vision
