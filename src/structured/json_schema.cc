// The JSON Schema compiler (json_schema.h).
#include "structured/json_schema.h"

#include <fmt/format.h>

#include <bitset>
#include <cmath>
#include <map>
#include <set>

namespace dsv4::structured {
namespace {

using ojson = nlohmann::ordered_json;

const std::set<std::string>& annotations() {
  static const std::set<std::string> k = {"title", "description", "default", "examples", "$schema",
                                          "$id",   "$comment",    "deprecated", "readOnly", "writeOnly"};
  return k;
}

const std::set<std::string>& supported() {
  static const std::set<std::string> k = {"type",     "properties", "required", "additionalProperties",
                                          "enum",     "const",      "items",    "minItems",
                                          "maxItems", "minLength",  "maxLength", "anyOf",
                                          "oneOf",    "$ref",       "$defs",    "definitions",
                                          "nullable", "minimum",    "maximum",  "exclusiveMinimum",
                                          "exclusiveMaximum"};
  return k;
}

Status refuse(const std::string& path, const std::string& what) {
  return Status(StatusCode::invalid_argument, path.empty() ? what : fmt::format("{} (at {})", what, path));
}

class Compiler {
 public:
  Compiler(Grammar& g, const ojson& doc, const SchemaLimits& limits) : g_(g), doc_(doc), limits_(limits) {}

  StatusOr<NodeId> compile(const ojson& s, const std::string& path) {
    if (static_cast<int32_t>(g_.nodes.size()) > limits_.max_nodes)
      return refuse(path, fmt::format("the schema is too large (over {} grammar nodes)", limits_.max_nodes));
    if (s.is_boolean()) {
      if (!s.get<bool>()) return refuse(path, "the schema 'false' accepts no value");
      return any();
    }
    if (!s.is_object()) return refuse(path, "a schema must be an object or a boolean");
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (!supported().count(it.key()) && !annotations().count(it.key())) {
        if (it.key() == "format")
          return refuse(path, fmt::format("'format' ({}) is not supported", it.value().dump()));
        return refuse(path, fmt::format("'{}' is not supported", it.key()));
      }
    }
    if (s.contains("$ref")) return ref(s, path);
    if (s.contains("enum") || s.contains("const")) return literals(s, path);
    if (s.contains("anyOf") || s.contains("oneOf")) return any_of(s, path);
    std::vector<std::string> types;
    if (const auto t = s.find("type"); t != s.end()) {
      if (t->is_string()) {
        types.push_back(t->get<std::string>());
      } else if (t->is_array() && !t->empty()) {
        for (const auto& e : *t) {
          if (!e.is_string()) return refuse(path, "'type' must be a string or a list of strings");
          types.push_back(e.get<std::string>());
        }
      } else {
        return refuse(path, "'type' must be a string or a list of strings");
      }
    } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("minLength") || s.contains("maxLength")) {
      types.push_back("string");
    } else {
      return any();
    }
    if (s.value("nullable", false) && std::find(types.begin(), types.end(), "null") == types.end())
      types.push_back("null");
    if (types.size() == 1) return typed(s, types[0], path);
    Node n;
    n.kind = NodeKind::any_of;
    for (const std::string& t : types) {
      StatusOr<NodeId> alt = typed(s, t, path);
      if (!alt.ok()) return alt.status();
      n.alts.push_back(*alt);
    }
    if (n.alts.size() == 2 && types[0] == "number" && types[1] == "integer") return n.alts[0];
    return checked_any_of(std::move(n), path, "type");
  }

  // Every any_of's alternatives must start with different bytes (and no alternative may begin with itself).
  Status check_first_bytes() {
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (g_.nodes[i].kind != NodeKind::any_of) continue;
      std::bitset<256> seen;
      for (NodeId a : g_.nodes[i].alts) {
        std::bitset<256> first;
        std::set<NodeId> visiting;
        if (!first_bytes(a, first, visiting)) return refuse("", "a '$ref' refers to itself before any object or array");
        if ((seen & first).any()) {
          for (int b = 0; b < 256; ++b) {
            if (seen[b] && first[b])
              return refuse(origin_[static_cast<NodeId>(i)],
                            fmt::format("'anyOf' alternatives that can both start with '{}' are not supported "
                                        "(each alternative must be a different JSON type, or different constants)",
                                        static_cast<char>(b)));
          }
        }
        seen |= first;
      }
    }
    return Status();
  }

 private:
  NodeId any() {
    if (any_ < 0) any_ = add_any_value(g_);
    return any_;
  }

  bool first_bytes(NodeId id, std::bitset<256>& out, std::set<NodeId>& visiting) {
    if (!visiting.insert(id).second) return false;
    const Node& n = g_.nodes[static_cast<size_t>(id)];
    switch (n.kind) {
      case NodeKind::object:
      case NodeKind::map: out.set('{'); break;
      case NodeKind::array: out.set('['); break;
      case NodeKind::string: out.set('"'); break;
      case NodeKind::number:
        out.set('-');
        for (char c = '0'; c <= '9'; ++c) out.set(static_cast<uint8_t>(c));
        break;
      case NodeKind::literals:
        for (const Literal& l : n.literals) out.set(static_cast<uint8_t>(l.text[0]));
        break;
      case NodeKind::any_of:
        for (NodeId a : n.alts) {
          if (!first_bytes(a, out, visiting)) return false;
        }
        break;
      case NodeKind::seq:
        if (!n.alts.empty() && !first_bytes(n.alts[0], out, visiting)) return false;
        break;
      default: break;
    }
    visiting.erase(id);
    return true;
  }

  StatusOr<NodeId> checked_any_of(Node n, const std::string& path, const char*) {
    const NodeId id = g_.add(std::move(n));
    origin_[id] = path;
    return id;
  }

  StatusOr<NodeId> ref(const ojson& s, const std::string& path) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() != "$ref" && it.key() != "$defs" && it.key() != "definitions" && !annotations().count(it.key()))
        return refuse(path, fmt::format("'$ref' beside '{}' is not supported", it.key()));
    }
    if (!s["$ref"].is_string()) return refuse(path, "'$ref' must be a string");
    const std::string target = s["$ref"].get<std::string>();
    if (auto hit = refs_.find(target); hit != refs_.end()) return hit->second;
    const ojson* node = resolve(target);
    if (node == nullptr)
      return refuse(path, fmt::format("'$ref' {} is not supported (only '#', '#/$defs/NAME' and "
                                      "'#/definitions/NAME' within the schema)",
                                      ojson(target).dump()));
    // A placeholder the target's own references point at: a one-part sequence (transparent to the matcher).
    Node hold;
    hold.kind = NodeKind::seq;
    const NodeId id = g_.add(std::move(hold));
    refs_[target] = id;
    StatusOr<NodeId> body = compile(*node, target.substr(1));
    if (!body.ok()) return body.status();
    if (*body == id) return refuse(path, fmt::format("'$ref' {} refers only to itself", ojson(target).dump()));
    g_.nodes[static_cast<size_t>(id)].alts = {*body};
    return id;
  }

  const ojson* resolve(const std::string& target) {
    if (target == "#") return &doc_;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p(prefix);
      if (target.compare(0, p.size(), p) != 0) continue;
      const std::string name = target.substr(p.size());
      const std::string section = p.substr(2, p.size() - 3);
      const auto sec = doc_.find(section);
      if (sec == doc_.end() || !sec->is_object()) return nullptr;
      const auto it = sec->find(name);
      return it == sec->end() ? nullptr : &*it;
    }
    return nullptr;
  }

  StatusOr<NodeId> literals(const ojson& s, const std::string& path) {
    std::vector<Literal> lits;
    std::set<std::string> seen;
    int64_t bytes = 0;
    auto add = [&](const ojson& v) {
      std::string text = v.dump();
      bytes += static_cast<int64_t>(text.size());
      if (seen.insert(text).second) lits.push_back({std::move(text), -1});
    };
    const char* key = s.contains("enum") ? "enum" : "const";
    if (s.contains("enum")) {
      const ojson& e = s["enum"];
      if (!e.is_array() || e.empty()) return refuse(path, "'enum' must be a non-empty array");
      if (static_cast<int32_t>(e.size()) > limits_.max_enum_values)
        return refuse(path, fmt::format("'enum' has {} values; at most {} are supported", e.size(),
                                        limits_.max_enum_values));
      for (const auto& v : e) add(v);
    } else {
      add(s["const"]);
    }
    if (bytes > limits_.max_enum_bytes)
      return refuse(path, fmt::format("'{}' values take {} bytes of JSON; at most {} are supported", key, bytes,
                                      limits_.max_enum_bytes));
    for (const Literal& l : lits) {
      if (l.text.size() > 4096) return refuse(path, fmt::format("an '{}' value is over 4096 bytes of JSON", key));
    }
    return add_literals(g_, std::move(lits));
  }

  StatusOr<NodeId> any_of(const ojson& s, const std::string& path) {
    const char* key = s.contains("anyOf") ? "anyOf" : "oneOf";
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() != key && it.key() != "$defs" && it.key() != "definitions" && !annotations().count(it.key()))
        return refuse(path, fmt::format("'{}' beside '{}' is not supported", key, it.key()));
    }
    const ojson& alts = s[key];
    if (!alts.is_array() || alts.empty()) return refuse(path, fmt::format("'{}' must be a non-empty array", key));
    if (alts.size() == 1) return compile(alts[0], fmt::format("{}/{}/0", path, key));
    Node n;
    n.kind = NodeKind::any_of;
    for (size_t i = 0; i < alts.size(); ++i) {
      StatusOr<NodeId> alt = compile(alts[i], fmt::format("{}/{}/{}", path, key, i));
      if (!alt.ok()) return alt.status();
      n.alts.push_back(*alt);
    }
    return checked_any_of(std::move(n), path.empty() ? "/" + std::string(key) : path + "/" + key, key);
  }

  static StatusOr<int64_t> count(const ojson& s, const char* key, const std::string& path, int64_t fallback) {
    const auto it = s.find(key);
    if (it == s.end()) return fallback;
    if (!it->is_number_integer() || it->get<int64_t>() < 0)
      return refuse(path, fmt::format("'{}' must be a non-negative integer", key));
    return it->get<int64_t>();
  }

  StatusOr<NodeId> typed(const ojson& s, const std::string& type, const std::string& path) {
    if (type == "string") {
      StatusOr<int64_t> lo = count(s, "minLength", path, 0), hi = count(s, "maxLength", path, -1);
      if (!lo.ok()) return lo.status();
      if (!hi.ok()) return hi.status();
      if (*hi >= 0 && *hi < *lo) return refuse(path, "'maxLength' is below 'minLength'");
      return add_string(g_, *lo, *hi);
    }
    if (type == "number" || type == "integer") return number(s, type == "integer", path);
    if (type == "boolean") return add_literals(g_, {{"true"}, {"false"}});
    if (type == "null") return add_literals(g_, {{"null"}});
    if (type == "array") {
      if (s.contains("items") && s["items"].is_array())
        return refuse(path, "'items' as a list (tuples) is not supported");
      StatusOr<int64_t> lo = count(s, "minItems", path, 0), hi = count(s, "maxItems", path, -1);
      if (!lo.ok()) return lo.status();
      if (!hi.ok()) return hi.status();
      if (*hi >= 0 && *hi < *lo) return refuse(path, "'maxItems' is below 'minItems'");
      Node n;
      n.kind = NodeKind::array;
      n.min = *lo;
      n.max = *hi;
      if (s.contains("items")) {
        StatusOr<NodeId> item = compile(s["items"], path + "/items");
        if (!item.ok()) return item.status();
        n.child = *item;
      } else {
        n.child = any();
      }
      return g_.add(std::move(n));
    }
    if (type == "object") return object(s, path);
    return refuse(path, fmt::format("'type' {} is not a JSON Schema type", ojson(type).dump()));
  }

  // Integers may be bounded (minimum, maximum, exclusive ones); bounds on other numbers are refused.
  StatusOr<NodeId> number(const ojson& s, bool integer, const std::string& path) {
    static const char* kBounds[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    bool bounded = false;
    for (const char* k : kBounds) bounded = bounded || s.contains(k);
    if (!bounded) return add_number(g_, integer);
    if (!integer) {
      for (const char* k : kBounds) {
        if (s.contains(k))
          return refuse(path, fmt::format("'{}' is only supported on integers (not on type 'number')", k));
      }
    }
    constexpr double kLimit = 9007199254740991.0;  // 2^53 - 1: every bound JSON clients send as a safe integer
    double lo = -kLimit, hi = kLimit;
    for (const char* k : kBounds) {
      if (!s.contains(k)) continue;
      if (!s[k].is_number()) return refuse(path, fmt::format("'{}' must be a number", k));
      const double v = s[k].get<double>();
      const std::string key(k);
      if (key == "minimum") lo = std::max(lo, std::ceil(v));
      if (key == "exclusiveMinimum") lo = std::max(lo, std::floor(v) + 1);
      if (key == "maximum") hi = std::min(hi, std::floor(v));
      if (key == "exclusiveMaximum") hi = std::min(hi, std::ceil(v) - 1);
    }
    lo = std::max(lo, -kLimit);
    hi = std::min(hi, kLimit);
    if (lo > hi) return refuse(path, "'minimum' / 'maximum' leave no integer");
    return add_bounded_integer(g_, static_cast<int64_t>(lo), static_cast<int64_t>(hi));
  }

  StatusOr<NodeId> object(const ojson& s, const std::string& path) {
    const ojson empty = ojson::object();
    const ojson& props = s.contains("properties") ? s["properties"] : empty;
    if (!props.is_object()) return refuse(path, "'properties' must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return refuse(path, "'required' must be an array of property names");
      for (const auto& r : s["required"]) {
        if (!r.is_string()) return refuse(path, "'required' must be an array of property names");
        if (!props.contains(r.get<std::string>()))
          return refuse(path, fmt::format("'required' names {}, which is not among 'properties'", r.dump()));
        required.insert(r.get<std::string>());
      }
    }
    if (static_cast<int32_t>(props.size()) > limits_.max_properties)
      return refuse(path, fmt::format("'properties' has {} entries; at most {} are supported", props.size(),
                                      limits_.max_properties));
    const auto extra = s.find("additionalProperties");
    if (extra != s.end() && !extra->is_boolean() && !extra->is_object())
      return refuse(path, "'additionalProperties' must be a boolean or a schema");
    if (props.empty() && !(extra != s.end() && extra->is_boolean() && !extra->get<bool>())) {
      // Free keys: values held to additionalProperties (any value when absent or true).
      Node n;
      n.kind = NodeKind::map;
      if (extra != s.end() && extra->is_object()) {
        StatusOr<NodeId> v = compile(*extra, path + "/additionalProperties");
        if (!v.ok()) return v.status();
        n.child = *v;
      } else {
        n.child = any();
      }
      n.alts = {add_string(g_)};
      return g_.add(std::move(n));
    }
    Node n;
    n.kind = NodeKind::object;
    for (auto it = props.begin(); it != props.end(); ++it) {
      StatusOr<NodeId> v = compile(it.value(), path + "/properties/" + it.key());
      if (!v.ok()) return v.status();
      n.props.push_back(Property{ojson(it.key()).dump(), *v, required.count(it.key()) > 0});
    }
    return g_.add(std::move(n));
  }

  Grammar& g_;
  const ojson& doc_;
  const SchemaLimits& limits_;
  std::map<std::string, NodeId> refs_;
  std::map<NodeId, std::string> origin_;
  NodeId any_ = -1;
};

// The fewest stack frames a value of each node needs to be written whole (kNever: no finite value: recursion through
// required properties or minItems that never bottoms out). A fixed point from kNever down.
constexpr int64_t kNever = INT64_MAX / 4;
std::vector<int64_t> min_depths(const Grammar& g) {
  std::vector<int64_t> d(g.nodes.size(), kNever);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      auto at = [&](NodeId id) { return id < 0 ? int64_t{0} : d[static_cast<size_t>(id)]; };
      int64_t v = kNever;
      switch (n.kind) {
        case NodeKind::string:
        case NodeKind::number:
        case NodeKind::raw_until:
        case NodeKind::map: v = 1; break;
        case NodeKind::literals:
          for (const Literal& l : n.literals) v = std::min(v, std::max<int64_t>(1, at(l.next)));
          break;
        case NodeKind::object:
          v = 1;
          for (const Property& p : n.props) {
            if (p.required) v = std::max(v, 1 + at(p.value));
          }
          break;
        case NodeKind::array: v = n.min > 0 ? 1 + at(n.child) : 1; break;
        case NodeKind::any_of:
          for (NodeId a : n.alts) v = std::min(v, at(a));
          break;
        case NodeKind::seq:
          v = 0;
          for (size_t k = 0; k < n.alts.size(); ++k) {
            v = std::max(v, (k + 1 < n.alts.size() ? 1 : 0) + at(n.alts[k]));  // the last part replaces the frame
          }
          break;
        case NodeKind::root: v = 1 + at(n.child); break;
      }
      v = std::min(v, kNever);
      if (v < d[i]) {
        d[i] = v;
        changed = true;
      }
    }
  }
  return d;
}

}  // namespace

Status check_nesting(const Grammar& g, NodeId value) {
  const int64_t need = min_depths(g)[static_cast<size_t>(value)];
  if (need >= kNever)
    return Status(StatusCode::invalid_argument,
                  "the schema has no finite value: its recursion through required properties (or minItems) never ends");
  if (need + 1 > g.limits.max_depth)
    return Status(StatusCode::invalid_argument,
                  fmt::format("the schema needs nesting {} deep; at most {} is supported", need, g.limits.max_depth - 1));
  return Status();
}

StatusOr<NodeId> add_json_schema(Grammar& g, const ojson& schema, const SchemaLimits& limits) {
  Compiler c(g, schema, limits);
  StatusOr<NodeId> id = c.compile(schema, "");
  if (!id.ok()) return id.status();
  Status first = c.check_first_bytes();
  if (!first.ok()) return first;
  return id;
}

StatusOr<Grammar> json_schema_grammar(const ojson& schema, const SchemaLimits& limits) {
  Grammar g;
  StatusOr<NodeId> value = add_json_schema(g, schema, limits);
  if (!value.ok()) return value.status();
  Status nesting = check_nesting(g, *value);
  if (!nesting.ok()) return nesting;
  add_root(g, *value);
  return g;
}

Grammar json_object_grammar() {
  Grammar g;
  const NodeId any = add_any_value(g);
  add_root(g, g.nodes[static_cast<size_t>(any)].alts[0]);  // the map alternative: an object
  return g;
}

}  // namespace dsv4::structured
