// The lane core's side of token constraints: the masks of a verify window's rows and the commit of each token.
//
// A row's mask is the constraint's mask at the position the row draws for, taking the window's proposals before it
// as accepted (a row is only kept when they were), so a kept draw saw exactly the mask a one-token-a-round run sees
// there: drafted == plain and concurrent == solo hold under a constraint.
#include <fmt/format.h>

#include "lanes/lane_host.h"

namespace dsv4::lanes {

std::shared_ptr<const TokenMask> LaneHost::constraint_mask(const Stream& s, ConstraintCursor& cursor) const {
  std::shared_ptr<const TokenMask> m = cursor.allowed();
  if (cursor.may_end()) {
    auto with_end = std::make_shared<TokenMask>(m != nullptr ? *m : TokenMask(info_.vocab_size));
    for (TokenId t : info_.eos_ids) with_end->allow(t);
    for (TokenId t : s.request.eos_ids) with_end->allow(t);
    m = std::move(with_end);
  }
  if (m == nullptr || m->empty()) return nullptr;
  return m;
}

std::vector<std::shared_ptr<const TokenMask>> LaneHost::constraint_masks(const Stream& s,
                                                                         const std::vector<TokenId>& tokens,
                                                                         size_t first) const {
  std::vector<std::shared_ptr<const TokenMask>> masks;
  std::unique_ptr<ConstraintCursor> cur = s.cursor != nullptr ? s.cursor->clone() : nullptr;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) {  // tokens[i]: the output before row i (forced, or a proposal row i - 1 must have drawn)
      const TokenId t = tokens[i];
      if (cur != nullptr) {
        if (is_eos(s.request, info_.eos_ids, t) || !cur->advance(t)) break;  // rows after it are never kept
      } else if (t == s.request.constraint_after) {
        cur = s.request.constraint->start();
      }
    }
    if (i < first || cur == nullptr) continue;
    if (masks.empty()) masks.resize(tokens.size());
    masks[i] = constraint_mask(s, *cur);  // null when stuck: conclude refuses to commit there
  }
  return masks;
}

std::string LaneHost::constraint_commit(Stream& s, TokenId token, bool forced) const {
  if (s.cursor == nullptr) {
    if (token == s.request.constraint_after) s.cursor = s.request.constraint->start();
    return {};
  }
  if (constraint_mask(s, *s.cursor) == nullptr) {
    return "the output constraint allows no token here (nesting beyond its depth limit)";
  }
  if (is_eos(s.request, info_.eos_ids, token) && s.cursor->may_end()) return {};
  if (!s.cursor->advance(token)) {
    return fmt::format("the {} token {} breaks the output constraint", forced ? "forced" : "drawn", token);
  }
  return {};
}

}  // namespace dsv4::lanes
