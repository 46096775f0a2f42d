// The per-step budget: how many prompt rows a step takes beside its verify windows.
//
// A step's verify windows are placed first (decoding streams never wait for a prompt); the prompt pieces get what a
// row budget (rows per step, windows included) and a time budget (the step's predicted time) leave, at most the
// prefill limit and at least a floor, so a prompt keeps filling however busy decoding is. The prediction comes from
// StepCosts, a running estimate of the backend's cost per prompt row and per verify row, fed by the steps timed on the
// lane core's clock (deterministic under a manual clock).
//
// Chunk sizes never change bits: pieces of any size give what the whole prompt gives (lanes/backend.h).
#pragma once

#include <cstdint>

namespace dsv4::lanes {

struct StepBudget {
  int64_t prefill_rows = 1;  // most prompt rows a step takes (all pieces); >= 1
  int64_t step_rows = 0;     // rows per step, windows and pieces together; 0 = no row budget
  int64_t step_ns = 0;       // predicted time per step; 0 = no time budget
  int64_t floor_rows = 1;    // least prompt rows a step with a prompt still filling takes; 1..prefill_rows
};

// Running estimates of the backend's time per prompt row and per verify row. Each kind's per-row cost carries its
// share of a step's fixed costs, so a prediction for chunks larger than those timed errs on the long side.
class StepCosts {
 public:
  // A step of `prefill_rows` prompt rows and `verify_rows` window rows took `ns`. A step of one kind updates that
  // kind's cost; a step of both kinds updates the prompt cost with what the known verify cost leaves of its time
  // (or, before any verify cost is known, the verify cost with what the prompt cost leaves).
  void observe(int64_t prefill_rows, int64_t verify_rows, int64_t ns);
  bool knows_prefill() const { return prefill_ns_ >= 0; }
  bool knows_verify() const { return verify_ns_ >= 0; }
  double prefill_ns_per_row() const { return prefill_ns_; }  // < 0: not known yet
  double verify_ns_per_row() const { return verify_ns_; }    // < 0: not known yet

 private:
  double prefill_ns_ = -1;
  double verify_ns_ = -1;
};

// The most prompt rows a step whose windows hold `verify_rows` rows takes: the prefill limit, cut by the row
// budget's rest and by the rows the time budget leaves (once the costs it needs are known), never below the floor.
int64_t prefill_chunk(const StepBudget& budget, const StepCosts& costs, int64_t verify_rows);

}  // namespace dsv4::lanes
