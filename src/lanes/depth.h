// The drafting depth rule: drafts per round from one request's own acceptance history and a fixed cost table.
//
// Depth never depends on timing or on other requests, so a request drafts the same way whatever the load.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dsv4::lanes {

class DepthRule {
 public:
  // max_depth: drafts at most; window_cost[r-1]: relative cost of a window of r rows (BackendInfo).
  DepthRule(int32_t max_depth, std::span<const double> window_cost);

  // Depth for the next verify: argmax over d of expected tokens / window_cost[d], smallest d on ties;
  // when that is 0, every 8th decision probes depth 1 so acceptance keeps being measured.
  int32_t next_depth();
  // A verified window offered `proposed` drafts and the target accepted the first `accepted`.
  void observe(int32_t proposed, int32_t accepted);
  // Estimated chance that draft level j (from 1) is accepted given levels before it were.
  double acceptance(int32_t level) const;

 private:
  int32_t max_depth_;
  std::vector<double> cost_;
  std::vector<int64_t> offered_;   // [max_depth]: times level j+1 was reached
  std::vector<int64_t> accepted_;  // [max_depth]: times level j+1 was accepted
  int64_t decisions_ = 0;
};

}  // namespace dsv4::lanes
