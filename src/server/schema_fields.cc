// JSON field readers for request validation (see schema_fields.h).
#include "server/schema_fields.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace dsv4::server::fields {

namespace {

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float: return "a number";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "an unsupported value";
  }
}

}  // namespace

ApiError wrong_type(const std::string& param, const char* expected, const json& got) {
  return bad_request(param, fmt::format("'{}' must be {}, got {}", param, expected, type_name(got)));
}

const json* field(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

bool read_bool(const json& obj, const char* key, const std::string& param, std::optional<bool>& out,
               ApiError& e) {
  const json* v = field(obj, key);
  if (!v) return true;
  if (!v->is_boolean()) return e = wrong_type(param, "a boolean", *v), false;
  out = v->get<bool>();
  return true;
}

bool read_number(const json& obj, const char* key, const std::string& param,
                 std::optional<double>& out, ApiError& e) {
  const json* v = field(obj, key);
  if (!v) return true;
  if (!v->is_number()) return e = wrong_type(param, "a number", *v), false;
  out = v->get<double>();
  return true;
}

bool read_int(const json& obj, const char* key, const std::string& param, int64_t lo, int64_t hi,
              std::optional<int64_t>& out, ApiError& e) {
  const json* v = field(obj, key);
  if (!v) return true;
  int64_t value = 0;
  if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(hi))
      return e = bad_request(param, fmt::format("'{}' must be at most {}, got {}", param, hi, u)),
             false;
    value = static_cast<int64_t>(u);
  } else if (v->is_number_integer()) {
    value = v->get<int64_t>();
  } else if (v->is_number_float()) {
    double d = v->get<double>();
    if (d != std::floor(d) || d < -9.2e18 || d > 9.2e18)
      return e = bad_request(param, fmt::format("'{}' must be an integer, got {}", param, d)), false;
    value = static_cast<int64_t>(d);
  } else {
    return e = wrong_type(param, "an integer", *v), false;
  }
  if (value < lo || value > hi)
    return e = bad_request(param, fmt::format("'{}' must be between {} and {}, got {}", param, lo,
                                              hi, value)),
           false;
  out = value;
  return true;
}

bool read_string(const json& obj, const char* key, const std::string& param,
                 std::optional<std::string>& out, ApiError& e) {
  const json* v = field(obj, key);
  if (!v) return true;
  if (!v->is_string()) return e = wrong_type(param, "a string", *v), false;
  out = v->get<std::string>();
  return true;
}

bool in_range(std::optional<double> v, double lo, double hi, bool lo_open, const char* param,
              ApiError& e) {
  if (!v) return true;
  bool ok = (lo_open ? *v > lo : *v >= lo) && *v <= hi;
  if (!ok)
    e = bad_request(param, fmt::format("'{}' must be in {}{}, {}], got {}", param,
                                       lo_open ? "(" : "[", lo, hi, *v));
  return ok;
}

bool read_token_ids(const json& arr, const std::string& param, const SchemaLimits& limits,
                    std::vector<int32_t>& out, ApiError& e) {
  out.clear();
  out.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    const json& t = arr[i];
    std::string p = fmt::format("{}[{}]", param, i);
    if (!t.is_number_integer() && !t.is_number_unsigned())
      return e = wrong_type(p, "an integer token id", t), false;
    int64_t id = t.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(
                                              t.get<uint64_t>(), uint64_t{1} << 62))
                                        : t.get<int64_t>();
    int64_t hi = limits.vocab_size > 0 ? limits.vocab_size : std::numeric_limits<int32_t>::max();
    if (id < 0 || id >= hi)
      return e = bad_request(p, fmt::format("token id {} is outside the vocabulary [0, {})", id, hi)),
             false;
    out.push_back(static_cast<int32_t>(id));
  }
  return true;
}

}  // namespace dsv4::server::fields
