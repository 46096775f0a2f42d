// Token constraints: a request's output (from some point on) must be a word of a language, decided token by token.
//
// A ConstraintCursor is where one stream stands in that language. The lane core clones it to walk a verify window's
// proposals (each row draws among the tokens the cursor allows after the proposals before it), and advances the
// stream's own cursor by every token it commits. The masks must be pure functions of the cursor's position, so a
// draw never depends on drafts, batching or timing: drafted == plain and concurrent == solo hold under a constraint.
#pragma once

#include <memory>

#include "lanes/token_mask.h"

namespace dsv4::lanes {

class ConstraintCursor {
 public:
  virtual ~ConstraintCursor() = default;
  virtual std::unique_ptr<ConstraintCursor> clone() const = 0;
  // The tokens that may come next, end-of-sequence tokens aside (see may_end). Empty with may_end() false means
  // the cursor is stuck, which the lane core reports as an error.
  virtual std::shared_ptr<const TokenMask> allowed() = 0;
  // Moves past `token`; false (cursor unchanged) when the token is not allowed here.
  virtual bool advance(TokenId token) = 0;
  // The output so far is a whole word: the lane core adds the end-of-sequence tokens to allowed().
  virtual bool may_end() const = 0;
};

// A constraint shared by requests: makes a cursor at the start of the language.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  virtual std::unique_ptr<ConstraintCursor> start() const = 0;
};

}  // namespace dsv4::lanes
