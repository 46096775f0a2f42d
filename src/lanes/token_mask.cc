// TokenMask and the masked keyed draw.
#include "lanes/token_mask.h"

#include <bit>
#include <limits>

namespace dsv4::lanes {

TokenMask TokenMask::of(int32_t vocab_size, std::span<const TokenId> ids) {
  TokenMask m(vocab_size);
  for (TokenId t : ids) m.allow(t);
  return m;
}

std::vector<TokenId> TokenMask::ids() const {
  std::vector<TokenId> out;
  out.reserve(static_cast<size_t>(count_));
  for (size_t w = 0; w < words_.size(); ++w) {
    for (uint64_t bits = words_[w]; bits != 0; bits &= bits - 1) {
      out.push_back(static_cast<TokenId>(w * 64 + static_cast<size_t>(std::countr_zero(bits))));
    }
  }
  return out;
}

TokenId draw_masked(std::span<const float> logits, const SamplingParams& params, uint64_t seed, int64_t position,
                    const TokenMask& mask) {
  if (mask.empty()) return sample_keyed(logits, params, seed, position);
  if (static_cast<size_t>(mask.vocab_size()) >= logits.size()) {
    // Greedy and unsorted draws skip the other ids instead of copying the row (the same draw).
    const TokenId drawn = sample_keyed_among(logits, params, seed, position, mask.words());
    if (drawn >= 0 && mask.contains(drawn)) return drawn;
    if (drawn >= 0 || params.greedy()) {
      for (size_t i = 0; i < logits.size(); ++i) {
        if (mask.contains(static_cast<TokenId>(i))) return static_cast<TokenId>(i);  // the lowest allowed id
      }
      return sample_keyed(logits, params, seed, position);  // no allowed id inside the row
    }
  }
  std::vector<float> masked(logits.size(), -std::numeric_limits<float>::infinity());  // f32 [V]
  TokenId lowest = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!mask.contains(static_cast<TokenId>(i))) continue;
    masked[i] = logits[i];
    if (lowest < 0) lowest = static_cast<TokenId>(i);
  }
  if (lowest < 0) return sample_keyed(logits, params, seed, position);  // no allowed id inside the row
  const TokenId drawn = sample_keyed(masked, params, seed, position);
  return mask.contains(drawn) ? drawn : lowest;  // every allowed logit is -inf or NaN
}

}  // namespace dsv4::lanes
