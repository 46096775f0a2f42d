// The token tries (vocabulary.h), built from the tokens sorted by their bytes, and the string-plain classes.
#include "structured/vocabulary.h"

#include "structured/utf8.h"

#include <algorithm>
#include <numeric>

namespace dsv4::structured {
namespace {

// The code points of `s` when it is whole UTF-8 characters with no quote, backslash or control character; else -1.
int64_t plain_code_points(const std::string& s) {
  int64_t cps = 0;
  uint32_t left = 0;
  uint64_t range = 0;
  for (char ch : s) {
    const uint8_t b = static_cast<uint8_t>(ch);
    if (left > 0) {
      if (!utf8_cont(b, left, range)) return -1;
      continue;
    }
    if (b < 0x20 || b == '"' || b == '\\') return -1;
    if (b >= 0x80 && !utf8_lead(b, left, range)) return -1;
    ++cps;
  }
  return left == 0 ? cps : -1;
}

}  // namespace

TokenTrie TokenTrie::build(const std::vector<std::string>& bytes, std::vector<TokenId> ids) {
  std::sort(ids.begin(), ids.end(), [&](TokenId a, TokenId b) {
    return bytes[static_cast<size_t>(a)] != bytes[static_cast<size_t>(b)]
               ? bytes[static_cast<size_t>(a)] < bytes[static_cast<size_t>(b)]
               : a < b;
  });
  // Nodes in creation order; with sorted input each node's children arrive in ascending byte order.
  std::vector<std::vector<std::pair<uint8_t, uint32_t>>> kids(1);
  std::vector<std::vector<TokenId>> terms(1);
  std::vector<uint32_t> path = {0};  // path[d]: the node after the first d bytes of the previous token
  const std::string* prev = nullptr;
  for (TokenId id : ids) {
    const std::string& s = bytes[static_cast<size_t>(id)];
    size_t common = 0;
    if (prev != nullptr) {
      const size_t n = std::min(prev->size(), s.size());
      while (common < n && (*prev)[common] == s[common]) ++common;
    }
    path.resize(common + 1);
    for (size_t d = common; d < s.size(); ++d) {
      const uint32_t child = static_cast<uint32_t>(kids.size());
      kids.emplace_back();
      terms.emplace_back();
      kids[path[d]].push_back({static_cast<uint8_t>(s[d]), child});
      path.push_back(child);
    }
    terms[path[s.size()]].push_back(id);
    prev = &s;
  }
  TokenTrie t;
  t.edge_begin.reserve(kids.size() + 1);
  t.term_begin.reserve(kids.size() + 1);
  for (size_t n = 0; n < kids.size(); ++n) {
    t.edge_begin.push_back(static_cast<uint32_t>(t.edge_byte.size()));
    for (const auto& [b, c] : kids[n]) {
      t.edge_byte.push_back(b);
      t.edge_child.push_back(c);
    }
    t.term_begin.push_back(static_cast<uint32_t>(t.term_ids.size()));
    t.term_ids.insert(t.term_ids.end(), terms[n].begin(), terms[n].end());
  }
  t.edge_begin.push_back(static_cast<uint32_t>(t.edge_byte.size()));
  t.term_begin.push_back(static_cast<uint32_t>(t.term_ids.size()));
  return t;
}

Vocabulary::Vocabulary(std::vector<std::string> bytes, std::vector<bool> usable)
    : bytes_(std::move(bytes)), usable_(std::move(usable)) {
  usable_.resize(bytes_.size(), false);
  std::vector<TokenId> all, rest;
  std::vector<int64_t> cps(bytes_.size(), -1);
  int64_t most = 0;
  for (size_t i = 0; i < bytes_.size(); ++i) {
    if (bytes_[i].empty()) usable_[i] = false;
    if (!usable_[i]) continue;
    all.push_back(static_cast<TokenId>(i));
    max_len_ = std::max(max_len_, bytes_[i].size());
    cps[i] = plain_code_points(bytes_[i]);
    if (cps[i] < 0) rest.push_back(static_cast<TokenId>(i));
    most = std::max(most, cps[i]);
  }
  all_ = TokenTrie::build(bytes_, std::move(all));
  rest_ = TokenTrie::build(bytes_, std::move(rest));
  plain_upto_.assign(static_cast<size_t>(most) + 1, lanes::TokenMask(size()));
  for (size_t i = 0; i < bytes_.size(); ++i) {
    if (cps[i] < 0) continue;
    for (int64_t k = cps[i]; k <= most; ++k) plain_upto_[static_cast<size_t>(k)].allow(static_cast<TokenId>(i));
  }
}

}  // namespace dsv4::structured
