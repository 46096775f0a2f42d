// Random routings for the routed-expert benchmarks: each row sent to k distinct experts.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace dsv4::bench {

// The (expert, row) pairs of a routing, sorted by expert then row (the grouped kernels' order).
struct RoutedPairs {
  std::vector<int32_t> expert, row;
};

// Rows 0..rows-1 each routed to the first k of a fresh shuffle of the E experts (rng advances).
inline RoutedPairs random_routing(std::mt19937& rng, int64_t E, int rows, int k) {
  std::vector<std::pair<int32_t, int32_t>> t;  // (expert, row)
  for (int r = 0; r < rows; ++r) {
    std::vector<int32_t> ex(E);
    for (int e = 0; e < E; ++e) ex[e] = e;
    std::shuffle(ex.begin(), ex.end(), rng);
    for (int j = 0; j < k; ++j) t.emplace_back(ex[j], r);
  }
  std::sort(t.begin(), t.end());
  RoutedPairs p;
  for (const auto& [e, r] : t) {
    p.expert.push_back(e);
    p.row.push_back(r);
  }
  return p;
}

}  // namespace dsv4::bench
