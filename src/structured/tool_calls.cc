// The tool-call block grammar (tool_calls.h).
#include "structured/tool_calls.h"

#include <fmt/format.h>

namespace dsv4::structured {
namespace {

using ojson = nlohmann::ordered_json;

NodeId literal(Grammar& g, std::string text, NodeId next) { return add_literals(g, {{std::move(text), next}}); }

NodeId seq(Grammar& g, std::vector<NodeId> parts) {
  Node n;
  n.kind = NodeKind::seq;
  n.alts = std::move(parts);
  return g.add(std::move(n));
}

// A parameter written as raw text (string="true"): a string-typed schema, or an enum / const of strings.
bool raw_text(const ojson& s) {
  if (!s.is_object()) return false;
  if (s.contains("enum") || s.contains("const")) {
    const ojson values = s.contains("enum") ? s["enum"] : ojson::array({s["const"]});
    if (!values.is_array() || values.empty()) return false;
    for (const auto& v : values) {
      if (!v.is_string()) return false;
    }
    return true;
  }
  return s.contains("type") && s["type"].is_string() && s["type"] == "string" && !s.contains("anyOf") &&
         !s.contains("oneOf");
}

class Builder {
 public:
  Builder(Grammar& g, const ToolMarkup& m, const SchemaLimits& limits) : g_(g), m_(m), limits_(limits) {}

  // Reserved up front: every invoke ends in it, and the name choice refers back to it (more calls).
  NodeId after_invoke = -1, names = -1;

  // The parameters of one tool from its header line on, ending in after_invoke.
  StatusOr<NodeId> params(const ToolSpec& tool, size_t index) {
    const std::string where = fmt::format("tools[{}] '{}'", index, tool.name);
    const ojson& p = tool.parameters;
    if (p.is_null() || (p.is_object() && !p.contains("properties"))) return close_only();
    Status refused;
    if (!p.is_object() || (p.contains("type") && p["type"] != "object")) {
      refused = Status(StatusCode::invalid_argument, "parameters must be an object schema");
    } else if (!p["properties"].is_object() || static_cast<int32_t>(p["properties"].size()) > limits_.max_properties) {
      refused = Status(StatusCode::invalid_argument,
                       fmt::format("'properties' must be an object of at most {} entries", limits_.max_properties));
    } else {
      StatusOr<NodeId> held = held_params(p);
      if (held.ok()) return held;
      refused = held.status();
    }
    if (tool.strict) return Status(StatusCode::invalid_argument, fmt::format("{}: {}", where, refused.message()));
    // Not strict: arguments the grammar cannot hold stay free text up to the invoke's end.
    Node raw;
    raw.kind = NodeKind::raw_until;
    raw.terminator = "\n" + m_.invoke_close;
    const NodeId r = g_.add(std::move(raw));
    return seq(g_, {r, after_invoke});
  }

 private:
  NodeId close_only() { return literal(g_, "\n" + m_.invoke_close, after_invoke); }

  StatusOr<NodeId> held_params(const ojson& p) {
    struct Param {
      std::string key;
      bool raw, required;
      NodeId value;  // raw: the value and its close; else the JSON value
    };
    std::vector<Param> ps;
    const ojson& props = p["properties"];
    std::vector<std::string> required;
    if (p.contains("required")) {
      if (!p["required"].is_array()) return Status(StatusCode::invalid_argument, "'required' must be an array");
      for (const auto& r : p["required"]) {
        if (!r.is_string() || !props.contains(r.get<std::string>()))
          return Status(StatusCode::invalid_argument,
                        fmt::format("'required' names {}, which is not among 'properties'", r.dump()));
        required.push_back(r.get<std::string>());
      }
    }
    for (auto it = props.begin(); it != props.end(); ++it) {
      if (it.key().find('"') != std::string::npos || it.key().empty())
        return Status(StatusCode::invalid_argument, fmt::format("parameter name {} cannot be written", ojson(it.key()).dump()));
      Param q{it.key(), raw_text(it.value()), false, -1};
      q.required = std::find(required.begin(), required.end(), it.key()) != required.end();
      ps.push_back(std::move(q));
      const ojson& s = it.value();
      if (ps.back().raw) {
        // Raw text holds its type, enum / const and maxLength; any other keyword is refused by name.
        for (auto k = s.begin(); k != s.end(); ++k) {
          static const char* kHeld[] = {"type", "enum", "const", "maxLength", "description", "title", "default",
                                        "examples", "$comment", "deprecated"};
          if (std::find_if(std::begin(kHeld), std::end(kHeld), [&](const char* h) { return k.key() == h; }) ==
              std::end(kHeld))
            return Status(StatusCode::invalid_argument,
                          fmt::format("'{}' is not supported (parameter '{}')", k.key(), it.key()));
        }
      }
      if (ps.back().raw && (s.contains("enum") || s.contains("const"))) {
        std::vector<Literal> lits;
        const ojson values = s.contains("enum") ? s["enum"] : ojson::array({s["const"]});
        for (const auto& v : values) lits.push_back({v.get<std::string>() + m_.param_close, -1});
        std::sort(lits.begin(), lits.end());
        lits.erase(std::unique(lits.begin(), lits.end(), [](const Literal& a, const Literal& b) { return a.text == b.text; }),
                   lits.end());
        ps.back().value = add_literals(g_, std::move(lits));
      } else if (ps.back().raw) {
        Node raw;
        raw.kind = NodeKind::raw_until;
        raw.terminator = m_.param_close;
        if (s.contains("maxLength") && s["maxLength"].is_number_integer())
          raw.max = std::clamp<int64_t>(s["maxLength"].get<int64_t>(), 0, 65535);
        ps.back().value = g_.add(std::move(raw));
      } else {
        StatusOr<NodeId> v = add_json_schema(g_, s, limits_);
        if (!v.ok())
          return Status(StatusCode::invalid_argument, fmt::format("{} (parameter '{}')", v.status().message(), it.key()));
        ps.back().value = seq(g_, {*v, literal(g_, m_.param_close, -1)});
      }
    }
    // choice[i]: what may follow once the parameters before i are settled (first[0]: right after the header line).
    const size_t n = ps.size();
    std::vector<NodeId> choice(n + 1);
    for (size_t i = n + 1; i-- > 0;) {
      std::vector<Literal> lits;
      bool required_left = false;
      for (size_t j = i; j < n; ++j) {
        const std::string lead = i == 0 ? "" : "\n";
        const std::string head = lead + m_.param_open + ps[j].key + "\" string=\"" + (ps[j].raw ? "true" : "false") + "\">";
        lits.push_back({head, seq(g_, {ps[j].value, choice_or_close(choice, j + 1, n)})});
        if (ps[j].required) {
          required_left = true;
          break;
        }
      }
      if (!required_left) lits.push_back({"\n" + m_.invoke_close, after_invoke});
      choice[i] = add_literals(g_, std::move(lits));
    }
    return choice[0];
  }

  // The choice after parameter j - 1 (not the first position, so its texts start with "\n").
  NodeId choice_or_close(const std::vector<NodeId>& choice, size_t j, size_t n) {
    return j <= n ? choice[j] : after_invoke;
  }

  Grammar& g_;
  const ToolMarkup& m_;
  const SchemaLimits& limits_;
};

}  // namespace

StatusOr<Grammar> tool_call_grammar(const ToolMarkup& markup, const std::vector<ToolSpec>& tools,
                                    const ToolGrammarOptions& options, const SchemaLimits& limits) {
  if (markup.empty()) return Status(StatusCode::unimplemented, "this model's chat format has no tool-call markup");
  if (tools.empty()) return Status(StatusCode::invalid_argument, "no tools are offered");
  Grammar g;
  g.limits.leading_whitespace = false;
  Builder b(g, markup, limits);
  // After an invoke: another call (parallel) or the block's end.
  Node after;
  after.kind = NodeKind::literals;
  b.after_invoke = g.add(std::move(after));
  Node names;
  names.kind = NodeKind::literals;
  b.names = g.add(std::move(names));
  std::vector<Literal> name_lits;
  NodeId named_start = -1;
  for (size_t i = 0; i < tools.size(); ++i) {
    if (tools[i].name.empty() || tools[i].name.find('"') != std::string::npos)
      return Status(StatusCode::invalid_argument, fmt::format("tools[{}]: a name that cannot be written", i));
    StatusOr<NodeId> p = b.params(tools[i], i);
    if (!p.ok()) return p.status();
    name_lits.push_back({tools[i].name + "\">\n", *p});
    if (options.start == ToolStart::named && tools[i].name == options.named) named_start = *p;
  }
  std::vector<Literal> after_lits = {{"\n" + markup.block_close, -1}};
  if (options.parallel) after_lits.push_back({"\n" + markup.invoke_open, b.names});
  std::sort(after_lits.begin(), after_lits.end());
  std::sort(name_lits.begin(), name_lits.end());
  g.nodes[static_cast<size_t>(b.after_invoke)].literals = std::move(after_lits);
  g.nodes[static_cast<size_t>(b.names)].literals = std::move(name_lits);
  NodeId start = b.names;
  if (options.start == ToolStart::named) {
    if (named_start < 0)
      return Status(StatusCode::invalid_argument, fmt::format("the named tool '{}' is not offered", options.named));
    start = named_start;
  } else if (options.start == ToolStart::content) {
    Node content;
    content.kind = NodeKind::raw_until;
    content.terminator = markup.block_open + markup.invoke_open;
    content.may_end = true;
    const NodeId c = g.add(std::move(content));
    start = seq(g, {c, b.names});
  }
  add_root(g, start);
  return g;
}

}  // namespace dsv4::structured
