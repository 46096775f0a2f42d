// The whole-model gate (docs/numerics.md): its prompts, the distances it pools and its verdict,
// shared by the oracle's gate test and the GPU forward tests.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends/cpu/forward.h"
#include "core/status.h"
#include "family/deepseek_v41/gate_weights.h"

namespace dsv4::cpu::gate {

// Gate weights: family::synthetic_weights(cfg, kSeed, ..., family::WeightProfile::gate), the family's seed.
inline constexpr uint64_t kSeed = family::kGateSeed;
// kPrompts fixed prompts of kPromptLength tokens, every row's logits, pooled.
inline constexpr int kPrompts = 8;
inline constexpr int kPromptLength = 64;
// NRMS(backend, ref64) <= kTolerance * F, F = NRMS(ref32, ref64) over the same logits.
inline constexpr double kTolerance = 1.05;

// Prompt k of the gate (k < kPrompts): kPromptLength ids in [0, vocab) from a 32-bit LCG
// (Numerical Recipes constants) seeded with 1000 + k.
std::vector<int32_t> prompt(int k, int64_t vocab);

// The top-1 of each row of logits [rows, vocab]: the largest logit, the lowest id on ties.
std::vector<int32_t> top1_ids(std::span<const float> logits, int64_t vocab);

// Squared distances of logits [rows, vocab] to a reference, summed over rows (pooled NRMS), and
// the rows whose top-1 (largest logit, lowest id on ties) equals the reference's.
struct Distance {
  double err2 = 0, ref2 = 0;
  int64_t rows = 0, top1 = 0;
  void add(std::span<const float> x, std::span<const float> ref, int64_t vocab);
  void add(const Distance& d);
  double nrms() const;  // sqrt(err2 / ref2)
};

struct Verdict {
  Distance floor;    // ref32 against ref64: F = floor.nrms()
  Distance backend;  // the backend against ref64
  double ratio() const { return backend.nrms() / floor.nrms(); }
  bool nrms_ok() const { return backend.nrms() <= kTolerance * floor.nrms(); }
  bool top1_ok() const { return backend.top1 == backend.rows; }
  bool pass() const { return nrms_ok() && top1_ok() && backend.rows > 0; }
  // One line: F, NRMS, ratio, top-1 counts of the backend and of ref32, pass / FAIL.
  std::string summary() const;
};

// Logits [kPromptLength, vocab] of prompt k, fed whole to a fresh stream of a new oracle.
StatusOr<std::vector<float>> oracle_logits(std::shared_ptr<const family::Model> w, const OracleOptions& o, int k);
StatusOr<std::vector<float>> oracle_logits(std::shared_ptr<const family::Model> w, Precision p, int k, int threads = 0);

}  // namespace dsv4::cpu::gate
