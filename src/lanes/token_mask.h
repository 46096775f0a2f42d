// A set of token ids as a bitset over the vocabulary: which tokens a constrained row may draw.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "lanes/sampling.h"

namespace dsv4::lanes {

class TokenMask {
 public:
  TokenMask() = default;
  explicit TokenMask(int32_t vocab_size) : vocab_(vocab_size), words_((static_cast<size_t>(vocab_size) + 63) / 64) {}
  // The ids of `ids` that lie in [0, vocab_size); others are ignored.
  static TokenMask of(int32_t vocab_size, std::span<const TokenId> ids);

  int32_t vocab_size() const { return vocab_; }
  void allow(TokenId t) {
    if (t >= 0 && t < vocab_ && !contains(t)) {
      words_[static_cast<size_t>(t) >> 6] |= uint64_t{1} << (t & 63);
      ++count_;
    }
  }
  bool contains(TokenId t) const {
    return t >= 0 && t < vocab_ && ((words_[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1u) != 0;
  }
  int32_t count() const { return count_; }
  bool empty() const { return count_ == 0; }
  // The allowed ids, ascending.
  std::vector<TokenId> ids() const;
  const uint64_t* words() const { return words_.data(); }
  bool operator==(const TokenMask&) const = default;

 private:
  int32_t vocab_ = 0;
  int32_t count_ = 0;
  std::vector<uint64_t> words_;
};

// The draw of a row restricted to `mask` (a mask over the row's vocabulary): sample_keyed on the row with every
// other logit set to -inf, so top-k / top-p / min-p see the masked distribution; when every allowed logit is
// -inf or NaN, the lowest allowed id. An empty mask draws from the whole row.
TokenId draw_masked(std::span<const float> logits, const SamplingParams& params, uint64_t seed, int64_t position,
                    const TokenMask& mask);

// A verify row's draw: draw_masked under `mask`, sample_keyed without one (nullptr).
inline TokenId draw_row(std::span<const float> logits, const SamplingParams& params, uint64_t seed, int64_t position,
                        const TokenMask* mask) {
  return mask != nullptr ? draw_masked(logits, params, seed, position, *mask)
                         : sample_keyed(logits, params, seed, position);
}

}  // namespace dsv4::lanes
