// The tensor-parallel points of a rank's forward (see tp_forward.h).
#include "backends/cuda/tp/tp_forward.h"

#include "backends/cuda/kernels/block/block_ops.cuh"
#include "backends/cuda/tp/collective.h"
#include "backends/cuda/exl3/exl3_gemm.cuh"
#include "backends/cuda/kernels/block/moe_experts.cuh"
#include "backends/cuda/tp/tp_ops.cuh"
#include "backends/cuda/model/upload.h"

namespace dsv4::cuda {

namespace {

StatusOr<float*> gather_groups(Collective& coll, Arena& scratch, cudaStream_t stream, const float* z, int64_t rows,
                               int64_t cols) {
  const int32_t world = coll.world();
  const size_t bytes = static_cast<size_t>(rows * cols * world) * sizeof(float);
  DSV4_ASSIGN_OR_RETURN(void* all, arena_alloc(scratch, bytes, "gathered output groups"));
  DSV4_ASSIGN_OR_RETURN(void* out, arena_alloc(scratch, bytes, "output groups of every rank"));
  DSV4_RETURN_IF_ERROR(coll.all_gather(z, rows * cols, static_cast<float*>(all), stream)
                           .with_context("gathering the output groups"));
  DSV4_CUDA_LAUNCH(tp_interleave_ranks(static_cast<float*>(all), world, rows, cols, static_cast<float*>(out), stream),
                   "tp_interleave_ranks", shape_text({{"rows", rows}, {"cols", cols}, {"world", world}}));
  return static_cast<float*>(out);
}

}  // namespace

StatusOr<float*> tp_gather_groups(CallCtx& c, const float* z, int64_t rows, int64_t cols) {
  return gather_groups(*c.collective, *c.scratch, c.stream, z, rows, cols);
}

StatusOr<float*> tp_gather_groups(OpCtx& c, const float* z, int64_t rows, int64_t cols) {
  return gather_groups(*c.collective, *c.scratch, c.stream, z, rows, cols);
}

Status embed_rows(OpCtx& c, const ModelDevice& M, const int32_t* ids, int64_t rows, float* h, float* pi) {
  const family::ModelPlan& cfg = *c.cfg;
  const int64_t D = cfg.dim, V = cfg.vocab;
  const int C = cfg.hc_mult;
  const auto shape = shape_text({{"rows", rows}, {"D", D}, {"table rows", M.embed_rows}});
  if (!c.collective) {
    if (M.embed_rows != V)
      return error(StatusCode::invalid_argument, "the embedding holds {} of {} rows on one GPU", M.embed_rows, V);
    DSV4_CUDA_LAUNCH(embed_streams(M.embed, ids, rows, C, D, h, pi, c.stream), "embed_streams", shape);
    return ok_status();
  }
  const int32_t world = c.collective->world(), rank = c.collective->rank();
  const int64_t Vl = M.embed_rows;
  if (Vl * world != V)
    return error(StatusCode::invalid_argument, "the embedding holds {} rows on each of {} ranks for a vocabulary of {}",
                 Vl, world, V);
  DSV4_ASSIGN_OR_RETURN(float* local, c.alloc<float>(rows * D, "this rank's embedding rows"));
  DSV4_ASSIGN_OR_RETURN(float* all, c.alloc<float>(world * rows * D, "every rank's embedding rows"));
  DSV4_CUDA_LAUNCH(tp_embed_local(M.embed, ids, rows, rank * Vl, Vl, D, local, c.stream), "tp_embed_local", shape);
  DSV4_RETURN_IF_ERROR(c.collective->all_gather(local, rows * D, all, c.stream).with_context("gathering the embedding"));
  DSV4_CUDA_LAUNCH(tp_embed_pick(all, ids, rows, Vl, C, D, h, pi, c.stream), "tp_embed_pick", shape);
  return ok_status();
}

Status tp_routed_experts(OpCtx& c, const MoeDevice& M, const float* x, const int32_t* pair_row,
                         const int32_t* pair_expert, const float* pair_weight, int64_t n_pairs, float* scratch,
                         float* routed) {
  const family::ModelPlan& cfg = *c.cfg;
  const int32_t world = c.collective->world(), rank = c.collective->rank();
  const int64_t D = cfg.dim, I = M.inter, E = M.n_experts;
  if (E % world != 0)
    return error(StatusCode::invalid_argument, "{} routed experts do not split over {} ranks", E, world);
  const int32_t per = static_cast<int32_t>(E / world);
  const auto shape = shape_text({{"pairs", n_pairs}, {"E", E}, {"D", D}, {"I", I}, {"world", world}});
  DSV4_ASSIGN_OR_RETURN(int32_t* mine, c.alloc<int32_t>(n_pairs, "this rank's pairs"));
  DSV4_ASSIGN_OR_RETURN(float* local, c.alloc<float>(n_pairs * D, "this rank's expert outputs"));
  DSV4_ASSIGN_OR_RETURN(float* all, c.alloc<float>(world * n_pairs * D, "every rank's expert outputs"));
  DSV4_CUDA_LAUNCH(tp_own_pairs(pair_expert, n_pairs, rank * per, (rank + 1) * per, mine, c.stream), "tp_own_pairs", shape);
  // The pairs of other ranks' experts are -1 in `mine`: both kernels skip them (their outputs are never picked).
  DSV4_CUDA_LAUNCH(M.exl3.n_experts ? exl3_routed_experts(x, pair_row, mine, pair_weight, n_pairs, M.exl3, cfg.swiglu_limit,
                                                          scratch, local, c.stream)
                                    : moe_routed_experts(x, pair_row, mine, pair_weight, n_pairs, M.w1, M.w3, M.w2, D, I,
                                                         cfg.act_block, cfg.swiglu_limit, scratch, local, c.stream),
                   "moe_routed_experts(rank)", shape);
  DSV4_RETURN_IF_ERROR(c.collective->all_gather(local, n_pairs * D, all, c.stream).with_context("gathering the experts"));
  DSV4_CUDA_LAUNCH(tp_pick_pairs(all, pair_expert, n_pairs, D, per, routed, c.stream), "tp_pick_pairs", shape);
  return ok_status();
}

Status tp_head_logits(OpCtx& c, const ModelDevice& M, const float* h, const float* pi, const int64_t* index, int64_t n,
                      float* logits) {
  return tp_head_logits(c, M.norm, M.head, M.head16, h, pi, index, n, logits);
}

Status tp_head_logits(OpCtx& c, const float* norm, const F32View& head, const Bf16View& head16, const float* h,
                      const float* pi, const int64_t* index, int64_t n, float* logits, float* collapsed) {
  const int64_t V = c.cfg->vocab;
  const int32_t tp = c.collective->world();
  const int64_t Vl = head16.w ? head16.out : head.out;
  // A head kept whole on every rank (an EXL3 head whose vocabulary slices are not on 128-column blocks,
  // fabric/rank_weights.h): each rank computes the whole logits itself, as one GPU does.
  if (Vl == V && tp > 1) return head_logits(c, norm, head, head16, h, pi, index, n, logits, collapsed);
  if (Vl * tp != V)
    return error(StatusCode::invalid_argument, "the head holds {} rows on each of {} ranks for a vocabulary of {}",
                 Vl, tp, V);
  DSV4_ASSIGN_OR_RETURN(float* local, c.alloc<float>(n * Vl, "head logits of this rank"));
  DSV4_ASSIGN_OR_RETURN(float* all, c.alloc<float>(n * V, "head logits of every rank"));
  DSV4_RETURN_IF_ERROR(head_logits(c, norm, head, head16, h, pi, index, n, local, collapsed));
  DSV4_RETURN_IF_ERROR(c.collective->all_gather(local, n * Vl, all, c.stream).with_context("gathering the head"));
  DSV4_CUDA_LAUNCH(tp_interleave_ranks(all, tp, n, Vl, logits, c.stream), "tp_interleave_ranks(head)",
                   shape_text({{"rows", n}, {"V", V}, {"world", tp}}));
  return ok_status();
}

}  // namespace dsv4::cuda
