// Depth rule: per-level acceptance with a prior (pseudo-counts), expected tokens per unit of window cost.
#include "lanes/depth.h"

#include <algorithm>

namespace dsv4::lanes {
namespace {

// Prior acceptance per level (engine-reference.md §1.2: 0.85, 0.75, 0.70, 0.65, 0.60, 0.55, then 0.5),
// weighted as this many observations.
constexpr double kPrior[] = {0.85, 0.75, 0.70, 0.65, 0.60, 0.55};
constexpr double kPriorWeight = 4.0;
constexpr int64_t kProbeEvery = 8;

double prior(int32_t level) {
  return level <= 6 ? kPrior[level - 1] : 0.5;
}

}  // namespace

DepthRule::DepthRule(int32_t max_depth, std::span<const double> window_cost)
    : cost_(window_cost.begin(), window_cost.end()) {
  max_depth_ = std::clamp<int32_t>(max_depth, 0, std::max<int32_t>(0, static_cast<int32_t>(cost_.size()) - 1));
  offered_.assign(static_cast<size_t>(max_depth_), 0);
  accepted_.assign(static_cast<size_t>(max_depth_), 0);
}

double DepthRule::acceptance(int32_t level) const {
  const size_t j = static_cast<size_t>(level - 1);
  return (static_cast<double>(accepted_[j]) + kPriorWeight * prior(level)) /
         (static_cast<double>(offered_[j]) + kPriorWeight);
}

int32_t DepthRule::next_depth() {
  const int64_t decision = decisions_++;
  if (max_depth_ == 0) return 0;
  int32_t best = 0;
  double best_rate = 1.0 / cost_[0];
  double expected = 1.0, reach = 1.0;
  for (int32_t d = 1; d <= max_depth_; ++d) {
    reach *= acceptance(d);
    expected += reach;
    const double rate = expected / cost_[static_cast<size_t>(d)];
    if (rate > best_rate) {
      best_rate = rate;
      best = d;
    }
  }
  if (best == 0 && decision % kProbeEvery == kProbeEvery - 1) return 1;
  return best;
}

void DepthRule::observe(int32_t proposed, int32_t accepted) {
  for (int32_t j = 0; j < std::min(proposed, max_depth_); ++j) {
    if (j > accepted) break;  // level j+1 was only reached if levels 1..j were accepted
    offered_[static_cast<size_t>(j)]++;
    if (j < accepted) accepted_[static_cast<size_t>(j)]++;
  }
}

}  // namespace dsv4::lanes
