// V4 / 0731 head on the device: hc_head's pre-mix collapses the streams before norm and head
// (model-spec.md §8; cpu::head_logits with hc).
#include "backends/cuda/forward/forward_v4.h"

#include "backends/cuda/kernels/block/block_ops.cuh"
#include "backends/cuda/runtime/check.h"
#include "backends/cuda/forward/forward_block.h"
#include "backends/cuda/kernels/linear/linear.cuh"
#include "backends/cuda/kernels/block/v4_ops.cuh"

namespace dsv4::cuda {

Status head_logits_v4(OpCtx& c, const ModelDevice& M, const float* h, const int64_t* index, int64_t n, float* logits) {
  if (!M.hc_head) return error(StatusCode::invalid_argument, "V4 head without hc_head weights");
  const family::ModelPlan& cfg = *c.cfg;
  const int C = cfg.hc_mult;
  const int64_t D = cfg.dim;
  const HcHeadDevice& W = *M.hc_head;
  const auto shape = shape_text({{"rows", n}, {"V", M.head.out > 0 ? M.head.out : M.head16.out}, {"D", D}});
  DSV4_ASSIGN_OR_RETURN(float* hs, c.alloc<float>(n * C * D, "head streams"));
  DSV4_ASSIGN_OR_RETURN(float* m, c.alloc<float>(n * C, "hc_head mixes"));
  DSV4_ASSIGN_OR_RETURN(float* pre, c.alloc<float>(n * C, "hc_head pre-mix"));
  DSV4_ASSIGN_OR_RETURN(float* x, c.alloc<float>(n * D, "head x"));
  DSV4_ASSIGN_OR_RETURN(float* xn, c.alloc<float>(n * D, "head xn"));
  DSV4_CUDA_LAUNCH(gather_rows(h, index, n, C * D, hs, c.stream), "gather_rows(h)", shape);
  DSV4_CUDA_LAUNCH(f32_linear(hs, n, W.fn, m, c.stream), "f32_linear(hc_head_fn)", shape);
  DSV4_CUDA_LAUNCH(hc_head_pre(m, hs, n, C, D, W.base, W.scale, cfg.norm_eps, cfg.hc_eps, pre, c.stream), "hc_head_pre", shape);
  DSV4_CUDA_LAUNCH(hc_collapse(hs, pre, C, n, C, D, x, c.stream), "hc_collapse(head)", shape);
  DSV4_CUDA_LAUNCH(rmsnorm_rows(x, n, D, M.norm, cfg.norm_eps, xn, c.stream), "rmsnorm(norm)", shape);
  DSV4_CUDA_LAUNCH(f32_linear_either(xn, n, M.head, M.head16, logits, c.stream), "f32_linear(head)", shape);
  DSV4_RETURN_IF_ERROR(op_probe(c, "final_norm", xn, n * D));
  return ok_status();
}

}  // namespace dsv4::cuda
