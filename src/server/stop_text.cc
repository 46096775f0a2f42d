// The stop-string hold-back (see stop_text.h).
#include "server/stop_text.h"

#include <algorithm>

namespace dsv4::server {

size_t stop_hold_length(std::string_view text, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const auto& s : stops) {
    if (s.empty()) continue;
    const size_t max_len = std::min(s.size() - 1, text.size());
    for (size_t len = max_len; len > hold; --len) {
      if (text.substr(text.size() - len) == std::string_view(s).substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  return hold;
}

}  // namespace dsv4::server
