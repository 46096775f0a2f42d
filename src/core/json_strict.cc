// parse_json_strict: a SAX handler over nlohmann::json's parser that builds the DOM itself, refusing
// duplicate keys and deep nesting (and staying linear where the callback parser is quadratic).
#include "core/json_strict.h"

#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace dsv4 {
namespace {

using Json = nlohmann::json;

// The keys seen so far in one open object. Small objects (every tensor entry) are scanned
// linearly; an object switches to a hash set once it has many keys.
struct Keys {
  std::vector<std::string> few;
  std::unordered_set<std::string> many;
  bool insert(const std::string& key) {
    if (many.empty()) {
      for (const auto& k : few)
        if (k == key) return false;
      few.push_back(key);
      if (few.size() > 16) {
        many.insert(few.begin(), few.end());
        few.clear();
      }
      return true;
    }
    return many.insert(key).second;
  }
};

// nlohmann::json SAX interface. Containers on `open_` stay at fixed addresses while open: object
// members live in std::map nodes, and an array gets no new element while its last one is open.
class StrictSax {
 public:
  StrictSax(Json& root, int max_depth) : root_(root), max_depth_(max_depth) {}

  bool null() { return value(Json(nullptr)); }
  bool boolean(bool v) { return value(Json(v)); }
  bool number_integer(Json::number_integer_t v) { return value(Json(v)); }
  bool number_unsigned(Json::number_unsigned_t v) { return value(Json(v)); }
  bool number_float(Json::number_float_t v, const std::string&) { return value(Json(v)); }
  bool string(Json::string_t& v) { return value(Json(std::move(v))); }
  bool binary(Json::binary_t& v) { return value(Json(std::move(v))); }

  bool start_object(std::size_t) { return open(Json::object(), true); }
  bool start_array(std::size_t) { return open(Json::array(), false); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(Json::string_t& k) {
    if (open_.size() == 1) top_key_ = k;
    if (!keys_.back()->insert(k)) {
      problem_ = open_.size() == 1 ? fmt::format("duplicate key '{}'", k)
                                   : fmt::format("duplicate key '{}' inside '{}'", k, top_key_);
      return false;
    }
    member_ = &(*open_.back())[k];
    return true;
  }

  template <typename Exception>
  bool parse_error(std::size_t, const std::string&, const Exception& ex) {
    problem_ = ex.what();
    return false;
  }

  const std::string& problem() const { return problem_; }

 private:
  // Places `v` where the parser is: the root, the end of the open array, or the pending member.
  Json* place(Json&& v) {
    if (open_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    if (open_.back()->is_array()) {
      auto& arr = open_.back()->get_ref<Json::array_t&>();
      arr.push_back(std::move(v));
      return &arr.back();
    }
    *member_ = std::move(v);
    return member_;
  }
  bool value(Json&& v) {
    place(std::move(v));
    return true;
  }
  bool open(Json&& container, bool object) {
    if (open_.size() >= static_cast<size_t>(max_depth_)) {
      problem_ = fmt::format("nested deeper than {} levels", max_depth_);
      return false;
    }
    open_.push_back(place(std::move(container)));
    keys_.emplace_back(object ? std::optional<Keys>(std::in_place) : std::nullopt);
    return true;
  }
  bool close() {
    open_.pop_back();
    keys_.pop_back();
    return true;
  }

  Json& root_;
  int max_depth_;
  std::vector<Json*> open_;
  std::vector<std::optional<Keys>> keys_;
  Json* member_ = nullptr;
  std::string top_key_;
  std::string problem_;
};

}  // namespace

StatusOr<Json> parse_json_strict(std::string_view label, std::string_view text, int max_depth) {
  Json root;
  StrictSax sax(root, max_depth);
  bool ok = false;
  try {
    ok = Json::sax_parse(text.begin(), text.end(), &sax, Json::input_format_t::json, /*strict=*/true);
  } catch (const Json::exception& x) {
    return error(StatusCode::data_loss, "{}: bad JSON: {}", label, x.what());
  }
  if (!ok) return error(StatusCode::data_loss, "{}: bad JSON: {}", label, sax.problem());
  return root;
}

}  // namespace dsv4
