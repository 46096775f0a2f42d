// Split semantics follow Hugging Face `tokenizers` (Pattern::find_matches + SplitDelimiterBehavior).
#include "tokenizer/pre_tokenizer.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "tokenizer/deepseek_split.h"

namespace dsv4 {
namespace {

using nlohmann::json;

// What ByteLevel(use_regex = true) splits with (GPT-2's pattern, as in `tokenizers`).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string escape_literal(std::string_view s) {
  std::string out;
  for (char c : s) {
    bool plain = (c & 0x80) || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (!plain) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

struct Piece {
  Span span;
  bool is_match;
};

// Applies one Split step to `in`, appending the resulting non-empty pieces to `out`.
void apply_split(const Regex& regex, bool empty_pattern, SplitBehavior behavior, bool invert,
                 std::string_view in, std::vector<std::string_view>& out) {
  thread_local std::vector<Span> matches;
  thread_local std::vector<Piece> marked, merged;
  matches.clear();
  marked.clear();
  merged.clear();
  if (!empty_pattern) regex.find_all(in, matches);
  uint32_t prev = 0;
  for (const Span& m : matches) {
    if (m.begin != prev) marked.push_back({{prev, m.begin}, invert});
    marked.push_back({m, !invert});
    prev = m.end;
  }
  if (prev != in.size()) marked.push_back({{prev, static_cast<uint32_t>(in.size())}, invert});

  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::isolated: merged = marked; break;
    case SplitBehavior::removed:
      for (const Piece& p : marked)
        if (!p.is_match) merged.push_back(p);
      break;
    case SplitBehavior::merged_with_previous:
      for (const Piece& p : marked) {
        if (p.is_match && !previous_match && !merged.empty()) merged.back().span.end = p.span.end;
        else merged.push_back(p);
        previous_match = p.is_match;
      }
      break;
    case SplitBehavior::merged_with_next:
      for (size_t i = marked.size(); i-- > 0;) {
        const Piece& p = marked[i];
        if (p.is_match && !previous_match && !merged.empty()) merged.back().span.begin = p.span.begin;
        else merged.push_back(p);
        previous_match = p.is_match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    case SplitBehavior::contiguous:
      for (const Piece& p : marked) {
        if (p.is_match == previous_match && !merged.empty()) merged.back().span.end = p.span.end;
        else merged.push_back(p);
        previous_match = p.is_match;
      }
      break;
  }
  for (const Piece& p : merged)
    if (p.span.end > p.span.begin) out.push_back(in.substr(p.span.begin, p.span.end - p.span.begin));
}

StatusOr<SplitBehavior> parse_behavior(const json& j) {
  if (!j.is_string()) return error(StatusCode::invalid_argument, "Split: \"behavior\" must be a string");
  std::string b = j.get<std::string>();
  if (b == "Removed") return SplitBehavior::removed;
  if (b == "Isolated") return SplitBehavior::isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (b == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (b == "Contiguous") return SplitBehavior::contiguous;
  return error(StatusCode::invalid_argument, "Split: unknown behavior \"{}\"", b);
}

}  // namespace

StatusOr<PreTokenizer> PreTokenizer::from_json(const json& j, bool regex_only) {
  PreTokenizer pt;
  if (j.is_null()) return pt;
  std::vector<const json*> items;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    return error(StatusCode::invalid_argument, "pre_tokenizer: expected an object with a \"type\"");
  if (j["type"] == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      return error(StatusCode::invalid_argument, "pre_tokenizer Sequence: missing \"pretokenizers\" array");
    for (const auto& item : j["pretokenizers"]) items.push_back(&item);
  } else {
    items.push_back(&j);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const json& item = *items[i];
    std::string type = item.is_object() && item.contains("type") && item["type"].is_string()
                           ? item["type"].get<std::string>() : std::string("?");
    auto where = [&](const Status& s) { return s.with_context(fmt::format("pre_tokenizer[{}] {}", i, type)); };
    if (pt.byte_level_)
      return error(StatusCode::unimplemented, "pre_tokenizer[{}] {}: steps after ByteLevel are not supported", i, type);
    if (type == "Split") {
      SplitStep step;
      if (!item.contains("pattern") || !item["pattern"].is_object())
        return where(error(StatusCode::invalid_argument, "missing \"pattern\" object"));
      const json& pat = item["pattern"];
      std::string regex;
      if (pat.contains("Regex") && pat["Regex"].is_string()) {
        regex = pat["Regex"].get<std::string>();
      } else if (pat.contains("String") && pat["String"].is_string()) {
        regex = escape_literal(pat["String"].get<std::string>());
        step.empty_pattern = regex.empty();
      } else {
        return where(error(StatusCode::invalid_argument, "\"pattern\" needs a \"Regex\" or \"String\" string"));
      }
      auto compiled = Regex::compile(step.empty_pattern ? std::string_view("x") : std::string_view(regex));
      if (!compiled.ok()) return where(compiled.status());
      step.regex = std::move(compiled).value();
      if (!item.contains("behavior")) return where(error(StatusCode::invalid_argument, "missing \"behavior\""));
      auto behavior = parse_behavior(item["behavior"]);
      if (!behavior.ok()) return where(behavior.status());
      step.behavior = *behavior;
      step.invert = item.value("invert", false);
      if (pat.contains("Regex")) step.source = regex;
      pt.steps_.push_back(std::move(step));
    } else if (type == "ByteLevel") {
      pt.byte_level_ = true;
      pt.add_prefix_space_ = item.value("add_prefix_space", false);
      pt.byte_level_regex_ = item.value("use_regex", true);
      if (pt.byte_level_regex_) {
        auto compiled = Regex::compile(kGpt2Pattern);
        if (!compiled.ok()) return where(compiled.status());
        pt.gpt2_.regex = std::move(compiled).value();
      }
    } else {
      return error(StatusCode::unimplemented, "pre_tokenizer type \"{}\" is not supported", type);
    }
  }
  bool deepseek = !regex_only && pt.steps_.size() == 3 && !pt.add_prefix_space_ && !pt.byte_level_regex_;
  for (size_t i = 0; deepseek && i < pt.steps_.size(); ++i) {
    const SplitStep& s = pt.steps_[i];
    deepseek = s.source == kDeepSeekSplitPatterns[i] && !s.empty_pattern && !s.invert &&
               s.behavior == SplitBehavior::isolated;
  }
  pt.deepseek_ = deepseek;
  return pt;
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces,
                         std::deque<std::string>& storage) const {
  thread_local std::vector<std::string_view> next;
  pieces.clear();
  if (deepseek_) {
    deepseek_split(text, pieces);
    return;  // (ByteLevel without a prefix space or regex adds nothing here)
  }
  if (!text.empty()) pieces.push_back(text);
  for (const SplitStep& step : steps_) {
    next.clear();
    for (std::string_view piece : pieces) apply_split(step.regex, step.empty_pattern, step.behavior, step.invert, piece, next);
    pieces.swap(next);
  }
  if (byte_level_ && (add_prefix_space_ || byte_level_regex_)) {
    next.clear();
    for (std::string_view piece : pieces) {
      if (add_prefix_space_ && piece.front() != ' ') {
        storage.push_back(" ");
        storage.back().append(piece);
        piece = storage.back();
      }
      if (byte_level_regex_) apply_split(gpt2_.regex, false, SplitBehavior::isolated, false, piece, next);
      else next.push_back(piece);
    }
    pieces.swap(next);
  }
}

}  // namespace dsv4
