// ConstraintCache: response_format to a token constraint.
#include "server/structured_output.h"

#include <fmt/format.h>

#include <algorithm>

#include "structured/json_schema.h"

namespace dsv4::server {

std::shared_ptr<const structured::Vocabulary> ConstraintCache::vocabulary(const TextSide& text) {
  {
    std::lock_guard lock(mu_);
    if (vocab_ != nullptr && vocab_of_ == &text) return vocab_;
  }
  std::lock_guard building(build_mu_);
  {
    std::lock_guard lock(mu_);
    if (vocab_ != nullptr && vocab_of_ == &text) return vocab_;  // built while this request waited
  }
  std::vector<std::string> bytes(static_cast<size_t>(text.vocab_size));
  std::vector<bool> usable(bytes.size());
  for (int32_t id = 0; id < text.vocab_size; ++id) {
    bytes[static_cast<size_t>(id)] = text.output_bytes(id);  // "" for special tokens: never allowed
    usable[static_cast<size_t>(id)] =
        !bytes[static_cast<size_t>(id)].empty() && (!text.constrainable || text.constrainable(id));
  }
  auto v = std::make_shared<const structured::Vocabulary>(std::move(bytes), std::move(usable));
  std::lock_guard lock(mu_);
  vocab_ = v;
  vocab_of_ = &text;
  kept_.clear();
  order_.clear();
  return v;
}

bool ConstraintCache::constraint(const TextSide& text, const std::string& key, const char* param,
                                 const std::function<StatusOr<structured::Grammar>()>& build,
                                 std::shared_ptr<const lanes::TokenConstraint>& out, ApiError& err) {
  std::shared_ptr<const structured::Vocabulary> vocab = vocabulary(text);
  {
    std::lock_guard lock(mu_);
    if (auto it = kept_.find(key); it != kept_.end()) {
      order_.erase(std::find(order_.begin(), order_.end(), key));
      order_.push_back(key);
      out = it->second;
      return true;
    }
  }
  StatusOr<structured::Grammar> g = build();
  if (!g.ok()) {
    err = bad_request(param, fmt::format("{}: {}", param, g.status().message()), "unsupported_schema");
    return false;
  }
  auto c = std::make_shared<structured::GrammarConstraint>(vocab, std::move(*g));
  std::lock_guard lock(mu_);
  if (kept_.size() >= kMaxEntries) {
    kept_.erase(order_.front());
    order_.pop_front();
  }
  kept_.emplace(key, c);
  order_.push_back(key);
  out = c;
  return true;
}

bool ConstraintCache::response_format(const TextSide& text, std::string_view body, ResponseFormat format,
                                      std::shared_ptr<const lanes::TokenConstraint>& out, ApiError& err) {
  out = nullptr;
  if (format == ResponseFormat::text) return true;
  if (format == ResponseFormat::json_object) {
    return constraint(text, "json_object", "response_format",
                      [] { return StatusOr<structured::Grammar>(structured::json_object_grammar()); }, out, err);
  }
  // The schema as written (ordered_json keeps the properties' order, which is the order they are generated in).
  const nlohmann::ordered_json doc = nlohmann::ordered_json::parse(body, nullptr, false);
  if (doc.is_discarded()) return err = bad_request("response_format", "the body is not JSON"), false;
  const nlohmann::ordered_json schema = doc["response_format"]["json_schema"]["schema"];
  return constraint(
      text, "json_schema:" + schema.dump(), "response_format.json_schema.schema",
      [&] { return structured::json_schema_grammar(schema); }, out, err);
}

}  // namespace dsv4::server

namespace dsv4::server {

bool ConstraintCache::tool_calls(const TextSide& text, std::string_view body, const ParsedRequest& pr, bool forced,
                                 const std::string& named, std::shared_ptr<const lanes::TokenConstraint>& out,
                                 ApiError& err) {
  out = nullptr;
  if (!forced && !pr.any_strict_tool && pr.parallel_tool_calls) return true;  // free calls
  if (text.tool_markup.empty()) {
    if (!forced) return err = bad_request("tools", "strict tools are not supported for this model's chat format"), false;
    return true;
  }
  const nlohmann::ordered_json doc = nlohmann::ordered_json::parse(body, nullptr, false);
  if (doc.is_discarded()) return err = bad_request("tools", "the body is not JSON"), false;
  std::vector<structured::ToolSpec> tools;
  for (const auto& t : doc["tools"]) {
    const auto& fn = t["function"];
    structured::ToolSpec spec;
    spec.name = fn["name"].get<std::string>();
    if (fn.contains("parameters")) spec.parameters = fn["parameters"];
    spec.strict = fn.contains("strict") && fn["strict"].is_boolean() && fn["strict"].get<bool>();
    tools.push_back(std::move(spec));
  }
  structured::ToolGrammarOptions options;
  options.parallel = pr.parallel_tool_calls;
  options.start = !forced ? structured::ToolStart::content
                  : named.empty() ? structured::ToolStart::block_name
                                  : structured::ToolStart::named;
  options.named = named;
  nlohmann::ordered_json key = {{"start", static_cast<int>(options.start)}, {"named", named},
                                {"parallel", options.parallel}, {"tools", doc["tools"]}};
  return constraint(
      text, "tools:" + key.dump(), "tools",
      [&] { return structured::tool_call_grammar(text.tool_markup, tools, options); }, out, err);
}

}  // namespace dsv4::server
