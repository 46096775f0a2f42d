// The tensor-parallel points of a rank's forward (fabric/rank_weights.h cuts its weights): with a
// Collective set, each rank runs its heads, output groups and routed experts, and these gather what the
// other ranks computed, so every rank then runs the one-GPU arithmetic on identical inputs:
//   before wo_b:      z f32 [rows, G*O] = every rank's [rows, G/tp * O] groups side by side (wo_b is whole)
//   the routed MoE:   every (row, expert) pair's output from the rank holding the expert, then the one-GPU
//                     combine (ascending expert order, + the whole shared expert, -> bf16)
//   the head:         logits f32 [n, V] = the ranks' [n, V / tp] rows side by side (or, for an EXL3 head
//                     kept whole on every rank, each rank's own whole logits: no gather)
//   the embedding:    each token's row from the rank holding its vocabulary range
// Gathers copy bits, no sums: TP N computes what one GPU computes, bit for bit, wherever a kernel's
// per-column arithmetic does not depend on how many columns a launch has (the FP8/FP4 linears choose their
// K slices from the output width, so a rank's narrower wq_b sums K in another order at full width from TP 4
// on; docs/fabric.md). EXL3 linears choose theirs from the whole linear's width (Exl3Weights::
// split_out_features, set by the rank cut), so EXL3 packs equal one GPU at every TP.
#pragma once

#include <cstdint>

#include "backends/cuda/forward/call.h"
#include "backends/cuda/forward/forward_block.h"
#include "core/status.h"

namespace dsv4::cuda {

// z f32 [rows, cols] of this rank's groups -> f32 [rows, world * cols] of every rank's, from c.scratch.
StatusOr<float*> tp_gather_groups(CallCtx& c, const float* z, int64_t rows, int64_t cols);
StatusOr<float*> tp_gather_groups(OpCtx& c, const float* z, int64_t rows, int64_t cols);

// The embedding of ids[0..rows) into h bf16 [rows, C, D] and pi f32 [rows, C], as embed_streams. On a
// tensor-parallel rank (c.collective set) M.embed holds vocabulary rows [rank * V/tp, (rank+1) * V/tp): each
// rank looks up the ids it holds, the [rows, D] blocks are gathered and every row is copied from its token's
// owner (never summed: the bits are the table's).
Status embed_rows(OpCtx& c, const ModelDevice& M, const int32_t* ids, int64_t rows, float* h, float* pi);

// moe_routed_experts (or exl3_routed_experts for a pack's experts) over this rank's experts (expert e lives
// on rank e / (E / world)), then every pair's output gathered: routed f32 [n_pairs, D] as one GPU computes
// it. scratch as moe_routed_experts / exl3_routed_experts_scratch_bytes.
Status tp_routed_experts(OpCtx& c, const MoeDevice& M, const float* x, const int32_t* pair_row,
                         const int32_t* pair_expert, const float* pair_weight, int64_t n_pairs, float* scratch,
                         float* routed);

// The head of rows index[0..n) on a rank holding head rows [rank * V/tp, (rank+1) * V/tp): every rank
// receives the full logits f32 [n, V] (device, vocabulary order) in logits. A rank holding all V rows
// (an EXL3 head kept whole, fabric/rank_weights.h) computes them itself.
Status tp_head_logits(OpCtx& c, const ModelDevice& M, const float* h, const float* pi, const int64_t* index, int64_t n,
                      float* logits);
// The same with another final norm (the drafter's), collapsed rows as head_logits.
Status tp_head_logits(OpCtx& c, const float* norm, const F32View& head, const Bf16View& head16, const float* h,
                      const float* pi, const int64_t* index, int64_t n, float* logits, float* collapsed = nullptr);

}  // namespace dsv4::cuda
