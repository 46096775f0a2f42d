// image_url dispatch: data: URLs decoded in place, http(s) fetched under the operator's policy.
#include "vision/fetch/image_url.h"

#include <algorithm>

#include "vision/data_url.h"
#include "vision/decode.h"
#include "vision/sniff.h"

namespace dsv4::vision {
namespace {

bool has_prefix_ci(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    const char c = s[i] >= 'A' && s[i] <= 'Z' ? static_cast<char>(s[i] - 'A' + 'a') : s[i];
    if (c != prefix[i]) return false;
  }
  return true;
}

}  // namespace

StatusOr<Image> load_image_url(std::string_view url, const ImageUrlOptions& o) {
  if (has_prefix_ci(url, "data:")) {
    DSV4_ASSIGN_OR_RETURN(DataUrl d, parse_data_url(url, static_cast<size_t>(o.limits.max_encoded_bytes)));
    return decode_image(d.bytes, d.mime, o.limits);
  }
  if (has_prefix_ci(url, "http://") || has_prefix_ci(url, "https://")) {
    FetchOptions f = o.fetch;
    f.max_bytes = std::min(f.max_bytes, o.limits.max_encoded_bytes);
    DSV4_ASSIGN_OR_RETURN(FetchedImage got, fetch_image(url, f));
    std::string_view type = got.content_type;
    if (has_prefix_ci(type, "application/octet-stream") || has_prefix_ci(type, "binary/octet-stream")) type = {};
    return decode_image(got.bytes, type, o.limits);
  }
  const size_t colon = url.find(':');
  return error(StatusCode::invalid_argument, "image_url must be a data: URL{} (got '{}')",
               o.fetch.enabled ? " or an http(s) URL" : "", colon == std::string_view::npos ? url.substr(0, 16) : url.substr(0, colon + 1));
}

}  // namespace dsv4::vision
