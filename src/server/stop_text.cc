// Stop-string matching with hold-back (see stop_text.h).
#include "server/stop_text.h"

#include <algorithm>

namespace dsv4::server {

StopText::StopText(std::vector<std::string> stops) : stops_(std::move(stops)) {}

std::string StopText::push(std::string_view text) {
  if (matched_) return {};
  pending_.append(text);
  // The earliest match of any stop string ends the text there.
  size_t best = std::string::npos;
  for (const auto& s : stops_) {
    size_t at = pending_.find(s);
    if (at < best) best = at;
  }
  if (best != std::string::npos) {
    matched_ = true;
    std::string out = pending_.substr(0, best);
    released_ += out.size();
    pending_.clear();
    return out;
  }
  // Hold back the longest suffix of pending_ that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    size_t max_len = std::min(s.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len)
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  released_ += out.size();
  return out;
}

std::string StopText::flush() {
  if (matched_) return {};
  std::string out;
  out.swap(pending_);
  released_ += out.size();
  return out;
}

}  // namespace dsv4::server
