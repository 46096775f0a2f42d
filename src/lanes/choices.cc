// Choice constraints: which tokens may come next, and the masks of a verify window's rows.
#include "lanes/choices.h"

#include <algorithm>

namespace dsv4::lanes {

ChoiceStep choice_step(const TokenChoices& choices, std::span<const TokenId> spelled) {
  ChoiceStep step;
  for (const std::vector<TokenId>& c : choices) {
    if (c.size() < spelled.size() || !std::equal(spelled.begin(), spelled.end(), c.begin())) continue;
    if (c.size() == spelled.size()) {
      step.complete = true;
      step.next.clear();
      return step;
    }
    step.next.push_back(c[spelled.size()]);
  }
  std::sort(step.next.begin(), step.next.end());
  step.next.erase(std::unique(step.next.begin(), step.next.end()), step.next.end());
  return step;
}

std::vector<std::vector<TokenId>> window_masks(const TokenChoices& choices, std::span<const TokenId> spelled,
                                               std::span<const TokenId> tokens, size_t first) {
  std::vector<std::vector<TokenId>> masks;
  std::vector<TokenId> prefix(spelled.begin(), spelled.end());
  for (size_t i = first; i < tokens.size(); ++i) {
    if (i > first) prefix.push_back(tokens[i]);  // the proposal row i - 1 must have drawn
    ChoiceStep step = choice_step(choices, prefix);
    if (step.complete || step.next.empty()) break;
    if (masks.empty()) masks.resize(tokens.size());
    masks[i] = std::move(step.next);
  }
  return masks;
}

}  // namespace dsv4::lanes
