// Choice constraints: the next tokens must spell one of a few token sequences (a forced tool call's name).
#pragma once

#include <span>
#include <vector>

#include "lanes/sampling.h"

namespace dsv4::lanes {

using TokenChoices = std::vector<std::vector<TokenId>>;  // each non-empty

// Where `spelled` (tokens drawn under the constraint so far) stands.
struct ChoiceStep {
  bool complete = false;      // `spelled` equals a choice: the constraint is over
  std::vector<TokenId> next;  // otherwise the tokens that continue a choice, ascending and distinct;
                              // empty when `spelled` is no choice's prefix (it broke the constraint)
};

ChoiceStep choice_step(const TokenChoices& choices, std::span<const TokenId> spelled);

// The per-row masks of one verify window (Window::allowed). Rows before `first` draw nothing that is kept
// (forced rows) and get no mask; row i >= first draws the token that follows spelled + tokens[first+1 .. i]
// (the window's proposals taken as accepted: a row is only kept when they were). Rows after the constraint
// is complete, or after a proposal that breaks it, get no mask. Returns empty when no row has one.
std::vector<std::vector<TokenId>> window_masks(const TokenChoices& choices, std::span<const TokenId> spelled,
                                               std::span<const TokenId> tokens, size_t first);

}  // namespace dsv4::lanes
