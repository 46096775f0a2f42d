// Shared setup of the oracle's model tests (forward_test, forward_v4_test, load_test,
// load_v4_test): pseudo-random prompts, a prompt fed to a fresh stream in pieces, and a tiny
// synthetic checkpoint written once per test binary.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/forward.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/synth.h"

namespace dsv4::cpu::oracle_testing {

// n tokens in [0, vocab) from a 32-bit LCG (Numerical Recipes constants) seeded with `seed`.
inline std::vector<int32_t> lcg_prompt(int n, uint32_t seed, int vocab) {
  std::vector<int32_t> t(n);
  uint32_t s = seed;
  for (auto& x : t) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<int32_t>((s >> 8) % static_cast<uint32_t>(vocab));
  }
  return t;
}

// Feeds `tokens` to a fresh stream in pieces of the given sizes; the logits of every row, in order.
inline std::vector<float> run_pieces(Oracle& o, const std::vector<int32_t>& tokens, const std::vector<int>& sizes) {
  const int32_t s = o.open_stream();
  std::vector<float> all;
  size_t at = 0;
  for (int n : sizes) {
    Piece p{s, {tokens.begin() + at, tokens.begin() + at + n}, {}};
    for (int i = 0; i < n; ++i) p.logit_rows.push_back(i);
    auto r = o.forward({p});
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (!r.ok()) return all;
    all.insert(all.end(), (*r)[0].logits.begin(), (*r)[0].logits.end());
    at += n;
  }
  EXPECT_EQ(at, tokens.size());
  return all;
}

// The tiny preset of `variant` written by the family's writer under DSV4_BINARY_DIR/name; returns
// the directory (call once and keep it: each call writes the checkpoint again).
inline std::string write_tiny_checkpoint(const std::string& name, family::Variant variant, uint64_t seed) {
  const std::string d = std::string(DSV4_BINARY_DIR) + "/" + name;
  family::SynthOptions o;
  o.seed = seed;
  o.sync = false;
  auto r = family::write_synthetic_checkpoint(family::preset_config(family::Preset::tiny, variant), d, o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return d;
}

}  // namespace dsv4::cpu::oracle_testing
