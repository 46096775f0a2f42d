// The token trie (vocabulary.h), built from the tokens sorted by their bytes.
#include "structured/vocabulary.h"

#include <algorithm>
#include <numeric>

namespace dsv4::structured {

Vocabulary::Vocabulary(std::vector<std::string> bytes, std::vector<bool> usable)
    : bytes_(std::move(bytes)), usable_(std::move(usable)) {
  usable_.resize(bytes_.size(), false);
  std::vector<TokenId> ids;
  for (size_t i = 0; i < bytes_.size(); ++i) {
    if (bytes_[i].empty()) usable_[i] = false;
    if (usable_[i]) ids.push_back(static_cast<TokenId>(i));
  }
  std::sort(ids.begin(), ids.end(), [&](TokenId a, TokenId b) {
    return bytes_[static_cast<size_t>(a)] != bytes_[static_cast<size_t>(b)]
               ? bytes_[static_cast<size_t>(a)] < bytes_[static_cast<size_t>(b)]
               : a < b;
  });
  // Nodes in creation order; with sorted input each node's children arrive in ascending byte order.
  std::vector<std::vector<std::pair<uint8_t, uint32_t>>> kids(1);
  std::vector<std::vector<TokenId>> terms(1);
  std::vector<uint32_t> path = {0};  // path[d]: the node after the first d bytes of the previous token
  const std::string* prev = nullptr;
  for (TokenId id : ids) {
    const std::string& s = bytes_[static_cast<size_t>(id)];
    max_len_ = std::max(max_len_, s.size());
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
  edge_begin_.reserve(kids.size() + 1);
  term_begin_.reserve(kids.size() + 1);
  for (size_t n = 0; n < kids.size(); ++n) {
    edge_begin_.push_back(static_cast<uint32_t>(edge_byte_.size()));
    for (const auto& [b, c] : kids[n]) {
      edge_byte_.push_back(b);
      edge_child_.push_back(c);
    }
    term_begin_.push_back(static_cast<uint32_t>(term_ids_.size()));
    term_ids_.insert(term_ids_.end(), terms[n].begin(), terms[n].end());
  }
  edge_begin_.push_back(static_cast<uint32_t>(edge_byte_.size()));
  term_begin_.push_back(static_cast<uint32_t>(term_ids_.size()));
}

}  // namespace dsv4::structured
