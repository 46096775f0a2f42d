// Streaming state machine over generated text: holds back marker prefixes, emits reasoning/content/tool deltas.
#include "tokenizer/dsml_parser.h"

#include <algorithm>
#include <initializer_list>
#include <utility>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_pyjson.h"

namespace dsv4::chat {
namespace {

// A tool name or parameter key longer than this (without its closing quote) is malformed; it
// bounds how much text a header can hold back.
constexpr size_t kMaxNameBytes = 512;
// Whitespace allowed between `<T invoke` and `name=` (the reference's `^\s*`).
constexpr size_t kMaxHeaderSpace = 64;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Length of the longest suffix of `text` that is a proper prefix of one of `markers`.
size_t partial_marker_suffix(std::string_view text, std::initializer_list<std::string_view> markers) {
  size_t best = 0;
  for (std::string_view m : markers) {
    const size_t max_len = std::min(text.size(), m.size() - 1);
    for (size_t len = max_len; len > best; --len) {
      if (text.substr(text.size() - len) == m.substr(0, len)) {
        best = len;
        break;
      }
    }
  }
  return best;
}

// Earliest full occurrence of any marker: {position, marker index}, or {npos, -1}.
std::pair<size_t, int> find_first(std::string_view text, std::initializer_list<std::string_view> markers) {
  size_t best = std::string_view::npos;
  int which = -1;
  int i = 0;
  for (std::string_view m : markers) {
    const size_t p = text.find(m);
    if (p < best) {
      best = p;
      which = i;
    }
    ++i;
  }
  return {best, which};
}

}  // namespace

void append_delta(ChatDelta& into, const ChatDelta& from) {
  into.reasoning_content += from.reasoning_content;
  into.content += from.content;
  for (const ToolCallDelta& d : from.tool_calls) {
    if (!into.tool_calls.empty() && into.tool_calls.back().index == d.index) {
      ToolCallDelta& last = into.tool_calls.back();
      if (last.id.empty()) last.id = d.id;
      if (last.name.empty()) last.name = d.name;
      last.arguments += d.arguments;
    } else {
      into.tool_calls.push_back(d);
    }
  }
}

DsmlStreamParser::DsmlStreamParser(ParserOptions options) : options_(std::move(options)) {
  const DsmlTags tags = dsml_tags(options_.format);
  const std::string d(kDsml);
  tool_start_ = "\n\n<" + d + std::string(tags.block);
  block_end_ = "</" + d + std::string(tags.block) + ">";
  invoke_open_ = "<" + d + std::string(tags.invoke);
  invoke_end_ = "</" + d + std::string(tags.invoke);
  param_open_ = "<" + d + std::string(tags.parameter);
  param_end_ = "</" + d + std::string(tags.parameter);
  state_ = options_.starts_in_tool_block ? State::block_next
           : options_.starts_in_reasoning ? State::reasoning
                                          : State::content;
  if (!options_.make_tool_call_id)
    options_.make_tool_call_id = [](int32_t index) { return "call_" + std::to_string(index); };
}

ChatDelta DsmlStreamParser::feed(std::string_view piece) {
  buf_.append(piece);
  while (step()) {
  }
  if (pos_ > 4096 && pos_ * 2 > buf_.size()) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  return std::exchange(out_, ChatDelta{});
}

ChatDelta DsmlStreamParser::finish() {
  final_ = true;
  while (step()) {
  }
  return std::exchange(out_, ChatDelta{});
}

void DsmlStreamParser::consume(size_t n, bool to_pending) {
  if (to_pending) pending_.append(buf_, pos_, n);
  pos_ += n;
}

DsmlStreamParser::Match DsmlStreamParser::starts_with(std::string_view lit) const {
  const std::string_view r = rest();
  const size_t n = std::min(r.size(), lit.size());
  if (r.substr(0, n) != lit.substr(0, n)) return Match::no;
  if (n == lit.size()) return Match::yes;
  return final_ ? Match::no : Match::more;
}

void DsmlStreamParser::emit_reasoning(std::string_view s) {
  out_.reasoning_content += s;
  message_.reasoning_content += s;
}

void DsmlStreamParser::emit_content(std::string_view s) {
  out_.content += s;
  message_.content += s;
}

void DsmlStreamParser::emit_arguments(std::string_view s) {
  ChatDelta d;
  d.tool_calls.push_back({next_index_ - 1, "", "", std::string(s)});
  append_delta(out_, d);
  message_.tool_calls.back().arguments += s;
  pending_.clear();
}

void DsmlStreamParser::open_call(std::string name) {
  const int32_t index = next_index_++;
  ChatDelta d;
  d.tool_calls.push_back({index, options_.make_tool_call_id(index), name, ""});
  append_delta(out_, d);
  message_.tool_calls.push_back({d.tool_calls[0].id, std::move(name), ""});
  pending_.clear();
  call_open_ = true;
  first_after_header_ = true;
  string_value_open_ = false;
  params_in_call_ = 0;
  keys_.clear();
}

void DsmlStreamParser::close_call() {
  std::string tail;
  if (string_value_open_) tail += '"';
  tail += params_in_call_ > 0 || string_value_open_ ? "}" : "{}";
  emit_arguments(tail);
  call_open_ = false;
  string_value_open_ = false;
}

bool DsmlStreamParser::malformed() {
  const std::string unreflected = std::move(pending_);
  if (call_open_) close_call();
  emit_content(unreflected);
  pending_.clear();
  state_ = State::content;
  return true;
}

bool DsmlStreamParser::wait_or_malformed() { return final_ ? malformed() : false; }

bool DsmlStreamParser::step_text() {
  const std::string_view r = rest();
  const bool reasoning = state_ == State::reasoning;
  const std::string_view first = reasoning ? kThinkEnd : std::string_view(tool_start_);
  auto [pos, which] = find_first(r, {first, kEos});
  if (which >= 0) {
    if (reasoning) emit_reasoning(r.substr(0, pos));
    else emit_content(r.substr(0, pos));
    if (which == 1) {
      consume(pos + kEos.size(), false);
      message_.ended_with_eos = true;
      state_ = State::done;
    } else if (reasoning) {
      consume(pos + first.size(), false);
      state_ = State::content;
    } else {
      consume(pos, false);
      consume(first.size(), true);
      state_ = State::block_open;
    }
    return true;
  }
  const size_t hold = final_ ? 0 : partial_marker_suffix(r, {first, kEos});
  const size_t n = r.size() - hold;
  if (n == 0) return false;
  if (reasoning) emit_reasoning(r.substr(0, n));
  else emit_content(r.substr(0, n));
  consume(n, false);
  return true;
}

bool DsmlStreamParser::step_invoke_header() {
  // \s* name="N">\n
  const std::string_view r = rest();
  size_t i = 0;
  while (i < r.size() && i < kMaxHeaderSpace && is_space(r[i])) ++i;
  if (i == kMaxHeaderSpace) return malformed();
  if (i == r.size()) return wait_or_malformed();
  constexpr std::string_view kName = "name=\"";
  const std::string_view after = r.substr(i);
  const size_t n = std::min(after.size(), kName.size());
  if (after.substr(0, n) != kName.substr(0, n)) return malformed();
  if (n < kName.size()) return wait_or_malformed();
  const size_t name_begin = i + kName.size();
  const size_t quote = r.find('"', name_begin);
  if (quote == std::string_view::npos)
    return r.size() - name_begin > kMaxNameBytes ? malformed() : wait_or_malformed();
  if (quote - name_begin > kMaxNameBytes || quote == name_begin) return malformed();
  constexpr std::string_view kClose = "\">\n";
  const std::string_view tail = r.substr(quote);
  const size_t m = std::min(tail.size(), kClose.size());
  if (tail.substr(0, m) != kClose.substr(0, m)) return malformed();
  if (m < kClose.size()) return wait_or_malformed();
  std::string name(r.substr(name_begin, quote - name_begin));
  consume(quote + kClose.size(), true);
  open_call(std::move(name));
  state_ = State::param_next;
  return true;
}

bool DsmlStreamParser::step_param_header() {
  // ␠name="K" string="true|false">
  const std::string_view r = rest();
  constexpr std::string_view kName = " name=\"";
  constexpr std::string_view kString = "\" string=\"";
  auto partial = [&](std::string_view text, std::string_view lit) {
    const size_t n = std::min(text.size(), lit.size());
    if (text.substr(0, n) != lit.substr(0, n)) return Match::no;
    return n == lit.size() ? Match::yes : Match::more;
  };
  Match mt = partial(r, kName);
  if (mt == Match::no) return malformed();
  if (mt == Match::more) return wait_or_malformed();
  const size_t key_begin = kName.size();
  const size_t quote = r.find('"', key_begin);
  if (quote == std::string_view::npos)
    return r.size() - key_begin > kMaxNameBytes ? malformed() : wait_or_malformed();
  if (quote - key_begin > kMaxNameBytes) return malformed();
  std::string key(r.substr(key_begin, quote - key_begin));
  mt = partial(r.substr(quote), kString);
  if (mt == Match::no) return malformed();
  if (mt == Match::more) return wait_or_malformed();
  const std::string_view flag = r.substr(quote + kString.size());
  bool is_string = false;
  size_t flag_len = 0;
  for (std::string_view lit : {std::string_view("true\">"), std::string_view("false\">")}) {
    const Match f = partial(flag, lit);
    if (f == Match::more) return wait_or_malformed();
    if (f == Match::yes) {
      is_string = lit[0] == 't';
      flag_len = lit.size();
    }
  }
  if (flag_len == 0 || keys_.count(key)) return malformed();
  consume(quote + kString.size() + flag_len, true);
  keys_.insert(key);
  std::string prefix = params_in_call_ == 0 ? "{" : ", ";
  append_python_json_string(prefix, key);
  prefix += ": ";
  param_is_string_ = is_string;
  if (is_string) {
    prefix += '"';
    emit_arguments(prefix);
    string_value_open_ = true;
  } else {
    param_prefix_ = std::move(prefix);
    value_scanned_ = 0;
  }
  state_ = State::param_value;
  return true;
}

bool DsmlStreamParser::step_param_value() {
  const std::string_view r = rest();
  // A non-string value stays in the buffer until its end tag; resume the search where the last
  // one stopped (less a marker's length) so a long value costs linear time.
  const size_t overlap = std::max(param_end_.size(), kEos.size());
  const size_t from = param_is_string_ || value_scanned_ < overlap ? 0 : value_scanned_ - overlap;
  auto [pos, which] = find_first(r.substr(from), {param_end_, kEos});
  if (which >= 0) pos += from;
  value_scanned_ = r.size();
  if (param_is_string_) {
    size_t n = r.size();
    if (which < 0 && !final_) n -= partial_marker_suffix(r, {param_end_, kEos});
    if (which >= 0) n = pos;
    if (n > 0) {
      std::string escaped;
      append_python_json_string(escaped, r.substr(0, n));
      emit_arguments(std::string_view(escaped).substr(1, escaped.size() - 2));
      consume(n, false);
    }
    if (which == 0) {
      emit_arguments("\"");
      string_value_open_ = false;
      ++params_in_call_;
      consume(param_end_.size(), true);
      state_ = State::param_close;
      return true;
    }
    if (which == 1 || final_) return malformed();
    return n > 0;
  }
  if (which == 1 || (which < 0 && final_)) return malformed();
  if (which < 0) return false;
  const std::string_view raw = r.substr(0, pos);
  std::string fragment = std::move(param_prefix_);
  if (nlohmann::json::accept(raw)) fragment += raw;
  else append_python_json_string(fragment, raw);
  emit_arguments(fragment);
  ++params_in_call_;
  consume(pos, false);
  consume(param_end_.size(), true);
  state_ = State::param_close;
  return true;
}

bool DsmlStreamParser::step() {
  if (pos_ >= buf_.size() && !(final_ && state_ != State::content && state_ != State::reasoning &&
                               state_ != State::done))
    return false;
  switch (state_) {
    case State::done:
      pos_ = buf_.size();
      return false;
    case State::reasoning:
    case State::content:
      return step_text();
    case State::block_open:
      switch (starts_with(">\n")) {
        case Match::yes: consume(2, true); state_ = State::block_next; return true;
        case Match::no: return malformed();
        case Match::more: return false;
      }
      break;
    case State::block_next: {
      const Match inv = starts_with(invoke_open_);
      const Match end = starts_with(block_end_);
      if (inv == Match::yes) {
        consume(invoke_open_.size(), true);
        state_ = State::invoke_header;
        return true;
      }
      if (end == Match::yes) {
        consume(block_end_.size(), false);
        pending_.clear();
        state_ = State::content;
        return true;
      }
      if (inv == Match::no && end == Match::no) return malformed();
      return false;
    }
    case State::invoke_header:
      return step_invoke_header();
    case State::param_next: {
      const Match par = starts_with(param_open_);
      const Match end = starts_with(invoke_end_);
      const Match nl_end = first_after_header_ ? starts_with("\n" + invoke_end_) : Match::no;
      if (par == Match::yes) {
        consume(param_open_.size(), true);
        first_after_header_ = false;
        state_ = State::param_header;
        return true;
      }
      if (end == Match::yes || nl_end == Match::yes) {
        consume((end == Match::yes ? 0 : 1) + invoke_end_.size(), true);
        state_ = State::invoke_close;
        return true;
      }
      if (par == Match::no && end == Match::no && nl_end == Match::no) return malformed();
      return false;
    }
    case State::param_header:
      return step_param_header();
    case State::param_value:
      return step_param_value();
    case State::param_close:
    case State::invoke_close:
      switch (starts_with(">\n")) {
        case Match::yes:
          consume(2, true);
          if (state_ == State::param_close) {
            pending_.clear();  // the parameter is complete and already emitted
            state_ = State::param_next;
          } else {
            close_call();
            state_ = State::block_next;
          }
          return true;
        case Match::no: return malformed();
        case Match::more: return false;
      }
      break;
  }
  return false;
}

ParsedMessage parse_completion(std::string_view text, const ParserOptions& options) {
  DsmlStreamParser parser(options);
  parser.feed(text);
  parser.finish();
  return parser.message();
}

}  // namespace dsv4::chat
