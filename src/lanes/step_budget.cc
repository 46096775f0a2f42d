// The per-step budget's arithmetic: the running cost estimate and the prompt chunk it allows.
#include "lanes/step_budget.h"

#include <algorithm>
#include <cmath>

namespace dsv4::lanes {
namespace {

// The newest step's share of an estimate: smooths a lone slow step (a first call that builds device state) and
// follows a change of load within a few steps.
constexpr double kNewest = 0.25;

void blend(double& estimate, double sample) {
  estimate = estimate < 0 ? sample : estimate + kNewest * (sample - estimate);
}

}  // namespace

void StepCosts::observe(int64_t prefill_rows, int64_t verify_rows, int64_t ns) {
  if (ns < 0 || (prefill_rows <= 0 && verify_rows <= 0)) return;
  const double t = static_cast<double>(ns);
  const double p = static_cast<double>(prefill_rows);
  const double v = static_cast<double>(verify_rows);
  if (verify_rows <= 0) {
    blend(prefill_ns_, t / p);
  } else if (prefill_rows <= 0) {
    blend(verify_ns_, t / v);
  } else if (knows_verify()) {
    blend(prefill_ns_, std::max(0.0, t - verify_ns_ * v) / p);
  } else if (knows_prefill()) {
    blend(verify_ns_, std::max(0.0, t - prefill_ns_ * p) / v);
  }
}

int64_t prefill_chunk(const StepBudget& budget, const StepCosts& costs, int64_t verify_rows) {
  int64_t chunk = budget.prefill_rows;
  if (budget.step_rows > 0) chunk = std::min(chunk, budget.step_rows - verify_rows);
  const bool predictable = costs.knows_prefill() && (verify_rows == 0 || costs.knows_verify());
  if (budget.step_ns > 0 && predictable && costs.prefill_ns_per_row() > 0) {
    const double verify_ns = verify_rows == 0 ? 0.0 : costs.verify_ns_per_row() * static_cast<double>(verify_rows);
    const double left = static_cast<double>(budget.step_ns) - verify_ns;
    const double rows = std::floor(left / costs.prefill_ns_per_row());
    if (rows < static_cast<double>(chunk)) chunk = static_cast<int64_t>(std::max(rows, -1.0));
  }
  return std::max(budget.floor_rows, std::min(chunk, budget.prefill_rows));
}

}  // namespace dsv4::lanes
