// Fetching an image_url over http(s): off unless the operator enables it; size and time limits; only
// public addresses (checked on every resolved address, then the connection pinned to a checked one);
// redirects are not followed.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace dsv4::vision {

struct FetchOptions {
  bool enabled = false;                       // http(s) image URLs are refused unless this is set
  int64_t max_bytes = 20 << 20;               // the body (after any Content-Encoding) may not exceed this
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds total_timeout{15000};  // from the start of the request to the last byte
  bool allow_http = true;                     // false: https only
  bool allow_private_addresses = false;       // true: skip the address policy (trusted networks, tests)
};

struct FetchedImage {
  std::vector<uint8_t> bytes;
  std::string content_type;  // the response's Content-Type ("" if absent); the decoder checks it
};

// The parts of an http(s) URL the fetcher uses. Userinfo ("user@host") is refused; IPv6 hosts come in
// brackets and are returned without them.
struct HttpUrl {
  std::string scheme;  // "http" or "https"
  std::string host;
  int port = 0;
  std::string target;  // path and query, "/" when empty; the fragment is dropped
};
StatusOr<HttpUrl> parse_http_url(std::string_view url);

// Fetches `url`. Errors (all invalid_argument): fetching disabled (the message says to send a data: URL),
// a malformed or non-http(s) URL, a host that resolves to a non-public address (naming the address and
// its class), connection failure, a status other than 200 (a redirect is named as not followed), a body
// over max_bytes (from Content-Length or while reading), the total timeout.
StatusOr<FetchedImage> fetch_image(std::string_view url, const FetchOptions& options);

}  // namespace dsv4::vision
