// One tensor-parallel rank's weights: the model's views cut to the slices the split plan gives that rank, so a
// backend reads, uploads and holds only its share.
//
// The rank's model is the whole model's equations over fewer heads and groups and fewer experts: its config
// says n_heads / tp and o_groups / tp; wo_b and the shared expert stay whole (they read gathered inputs, so
// they sum their whole K as on one GPU); each routed expert is held by its owner (expert_parallel), the others
// left empty (0 x 0) so expert ids stay global; the head and the embedding hold vocab / tp rows (vocab stays
// whole: token ids and the gathered logits are the full vocabulary). The DSpark stages are cut like the layers.
// The rank's forward gathers the groups' outputs before wo_b, every (row, expert) output before the combine,
// the head's rows and each token's embedding row from its owner (backends/cuda/tp/tp_forward.h), so every rank
// computes bit for bit what one GPU computes.
// EXL3 packs (the Mia layout) cut the same way: a routed expert stays whole on its owner and is emptied
// elsewhere; wq_b, wo_a and the head, which EXL3 stores as W [in, out], are cut along out (exl3_cut.h: whole
// 128-column blocks of the output Hadamard, svh along out, suh whole; wo_a's per-group parts are kept or
// dropped whole), each cut part keeping the whole part's K split (cpu::Exl3Part::k_split_out) so the rank's
// columns are summed as on one GPU. A cut that is not on 128-column blocks is refused by name.
// Kept whole on every rank (documented departures from the plan): the DSpark Markov head's embedding and
// head (bf16 [V, 256]; the draft reads one bias row per sequential step); an EXL3 head whose vocabulary
// slices are not all on 128-column blocks (V = 129,280 at TP 4 and 8): each rank then computes all logits.
// Refused: tp_intermediate plans (their partial sums round before the rank sum), V4-0731 weights (the CUDA
// forward runs V4.1).
#pragma once

#include <cstdint>

#include "family/deepseek_v41/model.h"
#include "core/status.h"
#include "fabric/split_plan.h"

namespace dsv4::fabric {

// Rank `rank`'s slice of `whole` under `plan`: views into the same stored bytes (a row cut is a narrower view;
// nothing is read), with an EXL3 linear's column cut copied from only that rank's columns. Every cut is checked
// against the plan's tensor of the same name (its dimension, its extent); a mismatch is refused by name.
StatusOr<std::shared_ptr<const family::Model>> rank_model(const family::Model& whole, const SplitPlan& plan,
                                                          int32_t rank);

}  // namespace dsv4::fabric
