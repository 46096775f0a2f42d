// Test-only (`dsv4 run --dump-pre-round`; docs/numerics.md, "dsv4 against DeepSeek's reference, row by row"): the
// values some of a layer's bf16 roundings round, before rounding, so that a row where dsv4 and another
// implementation part can be shown to straddle a rounding boundary.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

namespace dsv4::cpu {

// Receives one named set of values of the layer being tapped, in the accumulator's width widened to double, as
// [rows, values / rows] in the call's row order (the names: forward.h OracleOptions::pre_round_probe).
using PreRoundSink = std::function<void(const char* name, int64_t rows, std::vector<double> values)>;

// Storage for n values to be tapped when `sink` is set (NaN until written), else none.
template <typename Acc>
std::vector<Acc> pre_round_slots(const PreRoundSink* sink, int64_t n) {
  return sink ? std::vector<Acc>(n, std::numeric_limits<Acc>::quiet_NaN()) : std::vector<Acc>();
}

// The pointer the ops take for a tap: null (no tap) when the storage is empty.
template <typename Acc>
Acc* slots_of(std::vector<Acc>& v) { return v.empty() ? nullptr : v.data(); }

template <typename Acc>
void give_pre_round(const PreRoundSink* sink, const char* name, int64_t rows, const std::vector<Acc>& v) {
  if (sink) (*sink)(name, rows, std::vector<double>(v.begin(), v.end()));
}

}  // namespace dsv4::cpu
