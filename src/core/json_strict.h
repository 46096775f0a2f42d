// Strict JSON parsing for file headers: refuses duplicate keys and deep nesting, never throws.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "core/status.h"

namespace dsv4 {

// Parses `text` (the whole text must be one JSON value, surrounded only by whitespace). Unlike
// plain nlohmann::json::parse, a key repeated inside one object is an error (the JSON would
// otherwise silently keep the last), as is nesting deeper than `max_depth` arrays/objects.
// Errors are data_loss "LABEL: bad JSON: ..." naming the duplicate key and, for a nested
// duplicate, the top-level key it sits under.
StatusOr<nlohmann::json> parse_json_strict(std::string_view label, std::string_view text, int max_depth);

}  // namespace dsv4
