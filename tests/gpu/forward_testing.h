// Helpers shared by the GPU forward tests: the preset and variant they run, the fixed test prompts,
// row lists, NRMS, argmax, oracle runs with their per-layer streams, and the whole-model gate
// (docs/numerics.md) of a backend against the CPU oracle.
#pragma once

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/gate.h"

namespace dsv4::gpu_testing {

// The environment variable `name`, or `fallback` when it is not set.
inline std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

// The preset (DSV4_GPU_PRESET, tiny by default) and variant (DSV4_GPU_VARIANT, v41 by default) a
// test runs; family::parse_preset / parse_variant read them.
inline std::string preset_name() { return env_or("DSV4_GPU_PRESET", "tiny"); }
inline std::string variant_name() { return env_or("DSV4_GPU_VARIANT", "v41"); }


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

// FNV-1a over the bytes of every vector in turn: two builds print the same digest only when their
// outputs agree bit for bit (a kernel rewritten to keep its sum order is checked this way).
inline uint64_t digest(const std::vector<std::vector<float>>& vs) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& v : vs) {
    const auto* p = reinterpret_cast<const unsigned char*>(v.data());
    for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}

// Logits [n, V] of one whole-prompt call, with the streams after every layer.
struct LogitsRun {
  std::vector<float> logits;
  std::vector<std::vector<float>> layers;
};

// The oracle on weights `w` at precision p: `toks` fed whole to a fresh stream, every row's logits.
inline LogitsRun oracle_run(const std::shared_ptr<const family::Model>& w, cpu::Precision p,
                            const std::vector<int32_t>& toks) {
  LogitsRun run;
  cpu::OracleOptions o;
  o.precision = p;
  o.layer_probe = [&](int, const std::vector<float>& h) { run.layers.push_back(h); };
  auto oracle = cpu::Oracle::create(w, o);
  if (!oracle.ok()) return run;
  auto r = (*oracle)->forward({engine::Piece{(*oracle)->open_stream(), toks, all_rows(static_cast<int>(toks.size()))}});
  if (r.ok()) run.logits = (*r)[0].logits;
  return run;
}

// One line per layer: NRMS of the backend's and of ref32's streams against ref64, and their ratio.
inline void print_layer_table(const LogitsRun& backend, const LogitsRun& r32, const LogitsRun& r64) {
  std::printf("layer  NRMS(cuda,ref64)  NRMS(ref32,ref64)  ratio\n");
  for (size_t l = 0; l < backend.layers.size() && l < r64.layers.size() && l < r32.layers.size(); ++l) {
    const double a = nrms(backend.layers[l], r64.layers[l]), b = nrms(r32.layers[l], r64.layers[l]);
    std::printf("%5zu  %16.3e  %17.3e  %5.2f\n", l, a, b, b > 0 ? a / b : 0.0);
  }
}

// The whole-model gate of a backend on weights `w` (the gate weights: family::synthetic_weights with
// WeightProfile::gate, seed cpu::gate::kSeed): backend_logits(k) returns its logits
// [gate::kPromptLength, V] of gate prompt k fed whole to a fresh stream (empty on failure: the
// verdict then fails). ref32 and ref64 come from the CPU oracle, its 2 x kPrompts runs side by side
// (each on a share of the cores: far faster than one run after another); `configure(k, options)`
// may add probes to a run's options before it starts.
template <typename BackendLogits>
cpu::gate::Verdict whole_model_gate(
    const std::shared_ptr<const family::Model>& w, BackendLogits&& backend_logits,
    const std::function<void(int k, cpu::OracleOptions& o)>& configure = nullptr) {
  namespace gate = cpu::gate;
  const int64_t V = w->config.vocab_size;
  const int runs = 2 * gate::kPrompts;
  const int threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / runs);
  std::vector<std::future<StatusOr<std::vector<float>>>> ref(runs);
  for (int i = 0; i < runs; ++i) {
    cpu::OracleOptions o;
    o.precision = i % 2 ? cpu::Precision::ref64 : cpu::Precision::ref32;
    o.threads = threads;
    if (configure) configure(i / 2, o);
    ref[i] = std::async(std::launch::async, [&w, o, k = i / 2] { return gate::oracle_logits(w, o, k); });
  }
  std::vector<std::vector<float>> b(gate::kPrompts);
  for (int k = 0; k < gate::kPrompts; ++k) b[k] = backend_logits(k);
  std::printf("backend logits digest (FNV-1a of the bytes, all gate prompts): %016llx\n",
              static_cast<unsigned long long>(digest(b)));
  gate::Verdict v;
  bool ok = true;
  for (int k = 0; k < gate::kPrompts; ++k) {
    auto r32 = ref[2 * k].get();
    auto r64 = ref[2 * k + 1].get();
    if (!r32.ok() || !r64.ok() || b[k].size() != r64->size()) {
      std::printf("gate prompt %d: no logits (%s)\n", k,
                  !r32.ok() ? r32.status().to_string().c_str()
                            : !r64.ok() ? r64.status().to_string().c_str() : "backend size differs");
      ok = false;
      continue;
    }
    v.floor.add(*r32, *r64, V);
    v.backend.add(b[k], *r64, V);
  }
  return ok ? v : gate::Verdict{};  // no rows: pass() is false
}

// whole_model_gate for a forward `f` (a cuda::Forward, or anything with open_stream, forward,
// close_stream and set_layer_probe) on the gate weights `w`: each gate prompt fed whole to a fresh
// stream of f; prompt 0's per-layer stream table (f, ref32 against ref64) is printed under `title`.
template <typename Backend>
cpu::gate::Verdict forward_gate(Backend& f, const std::shared_ptr<const family::Model>& w,
                                const std::string& title) {
  const int64_t V = w->config.vocab_size;
  const int L = cpu::gate::kPromptLength;
  LogitsRun f0, r32, r64;  // prompt 0's streams after every layer
  const cpu::gate::Verdict v = whole_model_gate(
      w,
      [&](int k) {
        if (k == 0) f.set_layer_probe([&](int, const std::vector<float>& h) { f0.layers.push_back(h); });
        auto s = f.open_stream();
        std::vector<float> out;
        if (!s.ok()) return out;
        auto r = f.forward({engine::Piece{*s, cpu::gate::prompt(k, V), all_rows(L)}});
        f.set_layer_probe(nullptr);
        if (r.ok()) out = std::move((*r)[0].logits);
        else std::printf("gate prompt %d: %s\n", k, r.status().to_string().c_str());
        if (!f.close_stream(*s).ok()) out.clear();
        return out;
      },
      [&](int k, cpu::OracleOptions& o) {
        LogitsRun* run = o.precision == cpu::Precision::ref32 ? &r32 : &r64;
        if (k == 0) o.layer_probe = [run](int, const std::vector<float>& h) { run->layers.push_back(h); };
      });
  std::printf("%s: per-layer NRMS of the residual streams against ref64, gate prompt 0\n", title.c_str());
  print_layer_table(f0, r32, r64);
  return v;
}

}  // namespace dsv4::gpu_testing
