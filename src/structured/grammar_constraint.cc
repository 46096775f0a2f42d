// GrammarConstraint: mask building, the cache, and the cursor.
#include "structured/grammar_constraint.h"

#include <chrono>
#include <vector>

namespace dsv4::structured {
namespace {

class Cursor final : public lanes::ConstraintCursor {
 public:
  explicit Cursor(std::shared_ptr<const GrammarConstraint> c) : c_(std::move(c)) { c_->matcher().start(state_); }

  std::unique_ptr<lanes::ConstraintCursor> clone() const override {
    auto copy = std::make_unique<Cursor>(c_);
    state_.copy_to(copy->state_);
    return copy;
  }
  std::shared_ptr<const lanes::TokenMask> allowed() override { return c_->mask(state_); }
  bool advance(lanes::TokenId token) override {
    if (!c_->vocabulary().usable(token)) return false;
    return c_->matcher().feed(state_, c_->vocabulary().bytes(token));
  }
  bool may_end() const override { return c_->matcher().may_end(state_); }

 private:
  std::shared_ptr<const GrammarConstraint> c_;
  MatchState state_;
};

}  // namespace

GrammarConstraint::GrammarConstraint(std::shared_ptr<const Vocabulary> vocab, Grammar grammar)
    : vocab_(std::move(vocab)), grammar_(std::move(grammar)), matcher_(grammar_) {}

std::unique_ptr<lanes::ConstraintCursor> GrammarConstraint::start() const {
  return std::make_unique<Cursor>(shared_from_this());
}

std::shared_ptr<const lanes::TokenMask> GrammarConstraint::mask(const MatchState& state) const {
  std::string key = state.key();
  {
    std::lock_guard lock(mu_);
    if (auto it = cache_.find(key); it != cache_.end()) {
      ++stats_.masks_cached;
      return it->second;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<const lanes::TokenMask> m = build(state);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard lock(mu_);
  ++stats_.masks_built;
  stats_.build_seconds += seconds;
  if (cache_.size() >= kMaxCachedMasks) cache_.clear();
  cache_.emplace(std::move(key), m);
  return m;
}

ConstraintStats GrammarConstraint::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

std::shared_ptr<const lanes::TokenMask> GrammarConstraint::build(const MatchState& state) const {
  const Vocabulary& v = *vocab_;
  const TokenTrie* trie = &v.trie();
  std::shared_ptr<lanes::TokenMask> mask;
  if (state.depth > 0) {
    // Between the characters of a string, string-plain tokens only add code points (vocabulary.h): they are allowed
    // up to the string's room, whatever encloses it, and only the other tokens need the walk.
    const Frame& top = state.frames[state.depth - 1];
    const Node& n = grammar_.nodes[static_cast<size_t>(top.node)];
    if (n.kind == NodeKind::string && top.phase == 1) {
      mask = std::make_shared<lanes::TokenMask>(v.plain_within(n.max >= 0 ? n.max - top.a : -1));
      trie = &v.rest();
    }
  }
  if (mask == nullptr) mask = std::make_shared<lanes::TokenMask>(v.size());
  walk(*trie, state, *mask);
  return mask;
}

void GrammarConstraint::walk(const TokenTrie& t, const MatchState& state, lanes::TokenMask& mask) const {
  // Depth-first over the trie; states[d] is the matcher after the first d bytes of the current path.
  std::vector<MatchState> states(vocab_->max_token_bytes() + 1);
  state.copy_to(states[0]);
  struct Visit {
    uint32_t node, edge;
  };
  std::vector<Visit> path;
  path.push_back({0, t.edge_begin[0]});
  while (!path.empty()) {
    Visit& top = path.back();
    if (top.edge == t.edge_begin[top.node + 1]) {
      path.pop_back();
      continue;
    }
    const uint32_t e = top.edge++;
    const size_t d = path.size() - 1;
    MatchState& next = states[d + 1];
    states[d].copy_to(next);
    if (!matcher_.step(next, t.edge_byte[e])) continue;
    const uint32_t child = t.edge_child[e];
    for (uint32_t i = t.term_begin[child]; i < t.term_begin[child + 1]; ++i) mask.allow(t.term_ids[i]);
    if (t.edge_begin[child] != t.edge_begin[child + 1]) path.push_back({child, t.edge_begin[child]});
  }
}

}  // namespace dsv4::structured
