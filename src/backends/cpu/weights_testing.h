// Test helper: two models compared bit for bit — every stored tensor their views hold (by name, byte for byte),
// every EXL3 linear (its stored tensors), the Engram hash layout and token map — the differences listed by name.
#pragma once

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "family/deepseek_v41/model.h"

namespace dsv4::cpu::weights_testing {

struct CompareOptions {
  bool dspark = true;              // compare the drafters (false: either may lack one)
  bool engram_multipliers = true;  // compare the Engram hash multipliers
};

namespace detail {

inline std::map<std::string, TensorView> tensors(const family::Model& m, const CompareOptions& o) {
  std::map<std::string, TensorView> out;
  family::for_each_tensor(m.weights, m.plan, [&](const std::string& n, const TensorView& v) {
    // The image delimiters belong to the vision tower, which the oracle does not run.
    if ((o.dspark || n.rfind("mtp.", 0) != 0) && n.rfind("image_", 0) != 0) out.emplace(n, v);
  });
  return out;
}

inline std::map<std::string, family::Exl3Ref> exl3_linears(const family::Model& m, const CompareOptions& o) {
  std::map<std::string, family::Exl3Ref> out;
  family::ModelWeights w = m.weights;
  family::for_each_linear(w, m.plan, [&](const std::string& g, family::LinearRef r) {
    family::Exl3Ref e = std::visit([](auto* l) { return l->exl3; }, r);
    if (e && (o.dspark || g.rfind("mtp.", 0) != 0)) out.emplace(g, std::move(e));
  });
  return out;
}

inline bool same_exl3(const family::Exl3Linear& a, const family::Exl3Linear& b) {
  if (a.parts.size() != b.parts.size() || a.in != b.in || a.out != b.out) return false;
  for (size_t i = 0; i < a.parts.size(); ++i) {
    const exl3::Linear &x = a.parts[i].packed, &y = b.parts[i].packed;
    if (x.bits != y.bits || x.codebook != y.codebook || !(x.trellis == y.trellis) || x.suh != y.suh ||
        x.svh != y.svh || x.bias != y.bias || a.parts[i].in != b.parts[i].in || a.parts[i].out != b.parts[i].out)
      return false;
  }
  return true;
}

}  // namespace detail

// The names of everything that differs (empty: the same bit for bit).
inline std::vector<std::string> differences(const family::Model& a, const family::Model& b, CompareOptions o = {}) {
  std::vector<std::string> diffs;
  const auto ta = detail::tensors(a, o), tb = detail::tensors(b, o);
  for (const auto& [n, v] : ta) {
    const auto it = tb.find(n);
    if (it == tb.end()) {
      diffs.push_back(n + " (only in the first)");
      continue;
    }
    const TensorView& w = it->second;
    if (v.shape != w.shape || v.nbytes != w.nbytes || std::memcmp(v.data, w.data, static_cast<size_t>(v.nbytes)) != 0)
      diffs.push_back(n);
  }
  for (const auto& [n, v] : tb)
    if (!ta.count(n)) diffs.push_back(n + " (only in the second)");
  const auto xa = detail::exl3_linears(a, o), xb = detail::exl3_linears(b, o);
  for (const auto& [g, e] : xa) {
    const auto it = xb.find(g);
    if (it == xb.end() || !detail::same_exl3(*e, *it->second)) diffs.push_back(g + " (EXL3)");
  }
  for (const auto& [g, e] : xb)
    if (!xa.count(g)) diffs.push_back(g + " (EXL3, only in the second)");
  if (a.engram.layers.size() != b.engram.layers.size()) diffs.push_back("engram (layers)");
  for (size_t i = 0; i < a.engram.layers.size() && i < b.engram.layers.size(); ++i) {
    const family::EngramLayerLayout &x = a.engram.layers[i], &y = b.engram.layers[i];
    if (x.primes != y.primes || x.offsets != y.offsets) diffs.push_back("engram " + std::to_string(i) + " (primes)");
    if (o.engram_multipliers && x.multipliers != y.multipliers)
      diffs.push_back("engram " + std::to_string(i) + " (multipliers)");
  }
  if (a.engram_token_map != b.engram_token_map) diffs.push_back("engram_token_map");
  return diffs;
}

}  // namespace dsv4::cpu::weights_testing
