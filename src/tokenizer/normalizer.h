// tokenizer.json "normalizer": a chain of Unicode normalization steps applied before splitting.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace dsv4 {

class Normalizer {
 public:
  enum class Step { nfc, nfd, nfkc, nfkd, lowercase };

  // Accepts null, {"type":"Sequence","normalizers":[...]} and the step types above; any other type
  // is refused by name (it would silently change ids).
  static StatusOr<Normalizer> from_json(const nlohmann::json& j);

  bool empty() const { return steps_.empty(); }
  // `text` must be valid UTF-8.
  std::string apply(std::string_view text) const;

 private:
  std::vector<Step> steps_;
};

}  // namespace dsv4
