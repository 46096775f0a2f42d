// TokenMask, and draw_masked against its definition: sample_keyed on a copy of the row with every other logit at
// -inf, the lowest allowed id when that draw lands outside the mask (the fast paths must give the same ids).
#include "lanes/token_mask.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace dsv4::lanes {
namespace {

TokenId by_definition(const std::vector<float>& row, const SamplingParams& p, uint64_t seed, int64_t pos,
                      const TokenMask& m) {
  std::vector<float> masked(row.size(), -std::numeric_limits<float>::infinity());
  TokenId lowest = -1;
  for (size_t i = 0; i < row.size(); ++i) {
    if (!m.contains(static_cast<TokenId>(i))) continue;
    masked[i] = row[i];
    if (lowest < 0) lowest = static_cast<TokenId>(i);
  }
  const TokenId t = sample_keyed(masked, p, seed, pos);
  return m.contains(t) ? t : lowest;
}

TEST(TokenMask, SetOperations) {
  TokenMask m = TokenMask::of(130, std::vector<TokenId>{5, 64, 129, 5, -1, 130});
  EXPECT_EQ(m.count(), 3);
  EXPECT_TRUE(m.contains(64) && m.contains(129) && !m.contains(63) && !m.contains(130));
  EXPECT_EQ(m.ids(), (std::vector<TokenId>{5, 64, 129}));
}

TEST(TokenMask, DrawMaskedEqualsTheMaskedRowDraw) {
  std::mt19937 rng(11);
  const SamplingParams params[] = {{0.0f, 0, 1.0f, 0.0f},  {0.7f, 0, 1.0f, 0.0f}, {1.3f, 0, 1.0f, 0.05f},
                                   {0.9f, 5, 1.0f, 0.0f},  {0.8f, 0, 0.6f, 0.0f}, {1e-7f, 0, 1.0f, 0.0f}};
  int checked = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int V = 50 + static_cast<int>(rng() % 300);
    std::vector<float> row(static_cast<size_t>(V));
    std::normal_distribution<float> normal(0.f, 2.f);
    for (float& x : row) {
      const uint32_t k = rng() % 40;
      x = k == 0 ? -std::numeric_limits<float>::infinity() : k == 1 ? std::nanf("") : k == 2 ? 3.0f : normal(rng);
    }
    if (trial % 17 == 0) {
      for (float& x : row) x = -std::numeric_limits<float>::infinity();  // nothing finite
    }
    TokenMask m(V);
    const uint32_t density = 1 + rng() % 8;
    for (int i = 0; i < V; ++i) {
      if (rng() % density == 0) m.allow(i);
    }
    if (m.empty()) m.allow(V - 1);
    for (const SamplingParams& p : params) {
      const uint64_t seed = rng();
      const int64_t pos = static_cast<int64_t>(rng() % 1000);
      EXPECT_EQ(draw_masked(row, p, seed, pos, m), by_definition(row, p, seed, pos, m))
          << "trial " << trial << " T " << p.temperature << " top_k " << p.top_k << " top_p " << p.top_p;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 2400);
}

}  // namespace
}  // namespace dsv4::lanes
