// Stop strings on streamed text: releases text that cannot be the start of a stop string, holds
// back the rest, and reports the first match (the text before it is released, the rest dropped).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dsv4::server {

class StopText {
 public:
  explicit StopText(std::vector<std::string> stops);

  // Adds text; returns what is now safe to release. After a match, `matched()` is true, the text
  // before the stop string has been released and everything later is dropped.
  std::string push(std::string_view text);
  // Releases what is held back (the stream ended without a match).
  std::string flush();
  bool matched() const { return matched_; }
  // Bytes released so far (the position of the match once matched).
  size_t released() const { return released_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  size_t released_ = 0;
  bool matched_ = false;
};

}  // namespace dsv4::server
