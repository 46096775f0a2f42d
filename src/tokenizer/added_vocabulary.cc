// Trie-based leftmost-longest added-token matcher.
#include "tokenizer/added_vocabulary.h"

#include <algorithm>

#include <unicode/uchar.h>

#include "tokenizer/utf8.h"

namespace dsv4 {
namespace {

// The code point that ends (or starts) `s`, or -1 when there is none.
int32_t last_char(std::string_view s) {
  if (s.empty()) return -1;
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) --i;
  size_t n = utf8::valid_sequence_length(s, i);
  return n == 0 ? -1 : static_cast<int32_t>(utf8::decode_at(s, i, n));
}
int32_t first_char(std::string_view s) {
  if (s.empty()) return -1;
  size_t n = utf8::valid_sequence_length(s, 0);
  return n == 0 ? -1 : static_cast<int32_t>(utf8::decode_at(s, 0, n));
}

// Unicode \w (UTS #18): Alphabetic, marks, decimal digits, connector punctuation, Join_Control.
bool is_word_char(int32_t c) {
  if (c < 0) return false;
  if (u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL)) return true;
  int8_t t = u_charType(c);
  return t == U_NON_SPACING_MARK || t == U_ENCLOSING_MARK || t == U_COMBINING_SPACING_MARK ||
         t == U_DECIMAL_DIGIT_NUMBER || t == U_CONNECTOR_PUNCTUATION;
}

bool is_space(int32_t c) { return c >= 0 && u_hasBinaryProperty(c, UCHAR_WHITE_SPACE); }

// Byte length of the trailing / leading run of whitespace.
size_t trailing_space(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    int32_t c = last_char(s.substr(0, end));
    if (!is_space(c)) break;
    std::string tmp;
    utf8::append(tmp, static_cast<char32_t>(c));
    end -= tmp.size();
  }
  return s.size() - end;
}
size_t leading_space(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    int32_t c = first_char(s.substr(pos));
    if (!is_space(c)) break;
    pos += utf8::valid_sequence_length(s, pos);
  }
  return pos;
}

}  // namespace

void AddedTokenMatcher::build(const std::vector<const AddedToken*>& tokens, const std::vector<std::string>& patterns) {
  nodes_.assign(1, Node{});
  tokens_ = tokens;
  root_.fill(-1);
  for (size_t t = 0; t < tokens.size(); ++t) {
    const std::string& p = patterns[t];
    if (p.empty()) continue;
    int32_t node = 0;
    for (char ch : p) {
      uint8_t b = static_cast<uint8_t>(ch);
      int32_t next = child(node, b);
      if (next < 0) {
        next = static_cast<int32_t>(nodes_.size());
        nodes_.push_back(Node{});
        auto& kids = nodes_[node].children;
        kids.insert(std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, int32_t{0})), {b, next});
      }
      node = next;
    }
    nodes_[node].token = static_cast<int32_t>(t);  // a repeated pattern keeps the last token
  }
  for (const auto& [b, next] : nodes_[0].children) root_[b] = next;
}

int32_t AddedTokenMatcher::child(int32_t node, uint8_t b) const {
  const auto& kids = nodes_[node].children;
  auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, int32_t{0}));
  return it != kids.end() && it->first == b ? it->second : -1;
}

void AddedTokenMatcher::split(std::string_view text, std::vector<Segment>& out) const {
  size_t start_offset = 0;  // end of the previous emitted token
  size_t i = 0;
  while (i < text.size()) {
    int32_t node = root_[static_cast<uint8_t>(text[i])];
    if (node < 0) { ++i; continue; }
    // Longest pattern starting at i.
    int32_t best = nodes_[node].token;
    size_t best_end = i + 1;
    for (size_t j = i + 1; j < text.size(); ++j) {
      node = child(node, static_cast<uint8_t>(text[j]));
      if (node < 0) break;
      if (nodes_[node].token >= 0) { best = nodes_[node].token; best_end = j + 1; }
    }
    if (best < 0) { ++i; continue; }
    const AddedToken& tok = *tokens_[best];
    size_t start = i, stop = best_end;
    i = best_end;  // matching resumes after this match even when it is rejected below
    if (tok.single_word) {
      bool start_ok = start == 0 || !is_word_char(last_char(text.substr(0, start)));
      bool stop_ok = stop == text.size() || !is_word_char(first_char(text.substr(stop)));
      if (!start_ok || !stop_ok) continue;
    }
    if (tok.lstrip) start = std::max(start - trailing_space(text.substr(0, start)), start_offset);
    if (tok.rstrip) stop += leading_space(text.substr(stop));
    if (start > start_offset)
      out.push_back({{static_cast<uint32_t>(start_offset), static_cast<uint32_t>(start)}, -1});
    out.push_back({{static_cast<uint32_t>(start), static_cast<uint32_t>(stop)}, tok.id});
    start_offset = stop;
    i = std::max(i, stop);
  }
  if (start_offset < text.size())
    out.push_back({{static_cast<uint32_t>(start_offset), static_cast<uint32_t>(text.size())}, -1});
}

}  // namespace dsv4
