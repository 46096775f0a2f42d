// parse_json_strict: nlohmann::json's parser plus a callback that tracks keys per open object.
#include "core/json_strict.h"

#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

namespace dsv4 {
namespace {

// Thrown from the parse callback to stop at the first problem; caught below, never escapes.
struct JsonAbort {
  std::string problem;
};

}  // namespace

StatusOr<nlohmann::json> parse_json_strict(std::string_view label, std::string_view text, int max_depth) {
  using Json = nlohmann::json;
  // One key set per open object (nullopt for an open array).
  std::vector<std::optional<std::unordered_set<std::string>>> open;
  std::string top_key;  // the top-level key being parsed, for messages
  auto callback = [&](int /*depth*/, Json::parse_event_t event, Json& parsed) -> bool {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        if (open.size() >= static_cast<size_t>(max_depth)) {
          throw JsonAbort{fmt::format("nested deeper than {} levels", max_depth)};
        }
        if (event == Json::parse_event_t::object_start) {
          open.emplace_back(std::in_place);
        } else {
          open.emplace_back(std::nullopt);
        }
        break;
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        if (!open.empty()) open.pop_back();
        break;
      case Json::parse_event_t::key: {
        const std::string& key = parsed.get_ref<const std::string&>();
        if (open.size() == 1) top_key = key;
        if (!open.empty() && open.back() && !open.back()->insert(key).second) {
          if (open.size() == 1) throw JsonAbort{fmt::format("duplicate key '{}'", key)};
          throw JsonAbort{fmt::format("duplicate key '{}' inside '{}'", key, top_key)};
        }
        break;
      }
      case Json::parse_event_t::value:
        break;
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), callback);
  } catch (const JsonAbort& a) {
    return error(StatusCode::data_loss, "{}: bad JSON: {}", label, a.problem);
  } catch (const Json::exception& x) {
    return error(StatusCode::data_loss, "{}: bad JSON: {}", label, x.what());
  }
}

}  // namespace dsv4
