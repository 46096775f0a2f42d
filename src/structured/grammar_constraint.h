// A grammar over a vocabulary as a lane-core token constraint: token masks by a walk of the token trie from the
// cursor's stack, cached by the stack's bytes (a mask is a pure function of them).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "lanes/constraint.h"
#include "structured/grammar.h"
#include "structured/matcher.h"
#include "structured/vocabulary.h"

namespace dsv4::structured {

struct ConstraintStats {
  int64_t masks_built = 0;   // trie walks
  int64_t masks_cached = 0;  // masks answered from the cache
  double build_seconds = 0;  // time in trie walks
};

class GrammarConstraint final : public lanes::TokenConstraint,
                                public std::enable_shared_from_this<GrammarConstraint> {
 public:
  static constexpr size_t kMaxCachedMasks = 4096;  // masks kept (about 16 KiB each at 129K tokens); then cleared

  GrammarConstraint(std::shared_ptr<const Vocabulary> vocab, Grammar grammar);
  GrammarConstraint(const GrammarConstraint&) = delete;
  GrammarConstraint& operator=(const GrammarConstraint&) = delete;

  std::unique_ptr<lanes::ConstraintCursor> start() const override;

  const Vocabulary& vocabulary() const { return *vocab_; }
  const Matcher& matcher() const { return matcher_; }
  // The tokens whose bytes are all allowed from `state`.
  std::shared_ptr<const lanes::TokenMask> mask(const MatchState& state) const;
  // The same without the cache (a trie walk every call).
  std::shared_ptr<const lanes::TokenMask> build(const MatchState& state) const;
  ConstraintStats stats() const;

 private:
  // Allows in `mask` every token of `trie` whose bytes the matcher accepts from `state`.
  void walk(const TokenTrie& trie, const MatchState& state, lanes::TokenMask& mask) const;

  std::shared_ptr<const Vocabulary> vocab_;
  Grammar grammar_;
  Matcher matcher_;
  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, std::shared_ptr<const lanes::TokenMask>> cache_;
  mutable ConstraintStats stats_;
};

}  // namespace dsv4::structured
