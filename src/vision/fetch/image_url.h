// One image_url value (a data: URL, or http(s) when fetching is enabled) -> a decoded RGB image.
#pragma once

#include <string_view>

#include "core/status.h"
#include "vision/fetch/fetch.h"
#include "vision/image.h"

namespace dsv4::vision {

struct ImageUrlOptions {
  DecodeLimits limits;  // max_encoded_bytes also caps data: payloads and fetched bodies
  FetchOptions fetch;   // fetch.enabled = false (the default) refuses http(s) URLs
};

// data: URLs: the declared media type must agree with the bytes (none declared: the bytes decide).
// http(s) URLs: fetched under options.fetch; the response's Content-Type is the declared type, except that a
// missing one or application/octet-stream (or binary/octet-stream) declares nothing. Any other scheme is
// refused. Every error names the problem (see parse_data_url, fetch_image, decode_image).
StatusOr<Image> load_image_url(std::string_view url, const ImageUrlOptions& options);

}  // namespace dsv4::vision
