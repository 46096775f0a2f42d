// Helpers shared by the GPU forward tests: the fixed test prompts, row lists, NRMS, argmax and the
// whole-model gate (docs/numerics.md) of a backend against the CPU oracle.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <vector>

#include "backends/cpu/gate.h"

namespace dsv4::gpu_testing {

// A deterministic prompt of n token ids over the V4.1 vocabulary; `salt` picks another one.
inline std::vector<int32_t> prompt(int n, int salt = 0) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 7919 + 13 + salt * 104729) % 129280);
  return t;
}

// Rows 0..n-1 (logits of every row of a piece).
inline std::vector<int32_t> all_rows(int n) {
  std::vector<int32_t> r(n);
  for (int i = 0; i < n; ++i) r[i] = i;
  return r;
}

// ||a - ref|| / ||ref|| in double (||a - ref|| when ref is all zero).
inline double nrms(const float* a, const float* ref, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// NaN (so every bound fails) when the sizes differ.
inline double nrms(const std::vector<float>& a, const std::vector<float>& ref) {
  return a.size() == ref.size() ? nrms(a.data(), ref.data(), static_cast<int64_t>(a.size()))
                                : std::numeric_limits<double>::quiet_NaN();
}

// Index of the largest value, the lowest index on ties.
inline int64_t argmax(const float* v, int64_t n) {
  int64_t b = 0;
  for (int64_t i = 1; i < n; ++i)
    if (v[i] > v[b]) b = i;
  return b;
}

// The whole-model gate of a backend on weights `w` (the gate weights: cpu::synthetic_weights with
// WeightProfile::gate, seed cpu::gate::kSeed): backend_logits(k) returns its logits
// [gate::kPromptLength, V] of gate prompt k fed whole to a fresh stream (empty on failure: the
// verdict then fails). ref32 and ref64 come from the CPU oracle; `threads` its threads.
template <typename BackendLogits>
cpu::gate::Verdict whole_model_gate(const std::shared_ptr<const cpu::ModelWeights>& w, BackendLogits&& backend_logits,
                                    int threads = 0) {
  namespace gate = cpu::gate;
  gate::Verdict v;
  const int64_t V = w->config.vocab;
  for (int k = 0; k < gate::kPrompts; ++k) {
    auto r32 = gate::oracle_logits(w, cpu::Precision::ref32, k, threads);
    auto r64 = gate::oracle_logits(w, cpu::Precision::ref64, k, threads);
    const std::vector<float> b = backend_logits(k);
    if (!r32.ok() || !r64.ok() || b.size() != r64->size()) {
      std::printf("gate prompt %d: no logits (%s)\n", k,
                  !r32.ok() ? r32.status().to_string().c_str()
                            : !r64.ok() ? r64.status().to_string().c_str() : "backend size differs");
      return gate::Verdict{};  // no rows: pass() is false
    }
    v.floor.add(*r32, *r64, V);
    v.backend.add(b, *r64, V);
  }
  return v;
}

}  // namespace dsv4::gpu_testing
