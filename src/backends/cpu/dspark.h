// The DSpark drafter (model-spec.md §3.9): ring seeding from the target layers' taps for every
// main position, and the 3-stage draft of one block with the Markov head and confidence.
#pragma once

#include "backends/cpu/call_context.h"
#include "backends/cpu/forward.h"
#include "backends/cpu/stored.h"

namespace dsv4::cpu {

// taps bf16 [rows, n_taps * D]: writes each stage's ring row mk_p for every row of the call.
template <typename Acc>
void dspark_write_rings(CallCtx& c, const Vec& taps);

// Drafts `block` tokens after the stream's last position p given `next` (token at p + 1).
template <typename Acc>
DraftResult dspark_draft(ThreadPool& pool, const family::Model& M, const family::ModelPlan& cfg, const StateGeometry& geo,
                         const std::vector<float>& freqs_plain, const StreamState& s, int32_t next);

}  // namespace dsv4::cpu
