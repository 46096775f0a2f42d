// Blocks, MoE, Engram and head on the device (see forward_block.h).
#include "backends/cuda/forward/forward_block.h"

#include <algorithm>

#include "backends/cuda/kernels/block/block_ops.cuh"
#include "backends/cuda/runtime/check.h"
#include "backends/cuda/kernels/linear/linear.cuh"
#include "backends/cuda/kernels/block/moe_experts.cuh"
#include "backends/cuda/tp/tp_forward.h"
#include "backends/cuda/kernels/block/v4_ops.cuh"

namespace dsv4::cuda {

namespace {

// Up to this many (row, expert) pairs (decode and verify rounds of a few streams) the router's
// selection and pair sort run as one single-block launch; above, one block per row then the sort.
// Either way the same device code computes every value.
constexpr int64_t kFusedRoutePairs = 96;

// Mixing coefficients of one sub-layer: m = fp32-linear(h; fn) and the row statistics (fused in
// fixed K-slices for C <= 4), then the per-row Sinkhorn.
Status mixes(OpCtx& c, const HcDevice& P, const float* h, int64_t rows, float* mix) {
  const family::ModelPlan& cfg = *c.cfg;
  const int C = cfg.hc_mult;
  const int64_t D = cfg.dim, nm = static_cast<int64_t>(C) * (C + 2);
  const auto shape = shape_text({{"rows", rows}, {"C", C}, {"D", D}});
  if (nm <= 24 && (C * D) % kHcSplits == 0) {
    DSV4_ASSIGN_OR_RETURN(float* part, c.alloc<float>(rows * kHcSplits * (nm + 1), "hc mix partials"));
    DSV4_CUDA_LAUNCH(hc_mix_partials(h, P.fn.w, rows, C, D, part, c.stream), "hc_mix_partials", shape);
    DSV4_CUDA_LAUNCH(hc_mix_from_partials(part, rows, C, D, P.base, P.scale[0], P.scale[1], P.scale[2], cfg.norm_eps,
                                          cfg.hc_eps, cfg.hc_sinkhorn_iters, mix, c.stream),
                     "hc_mix_from_partials", shape);
    return ok_status();
  }
  DSV4_ASSIGN_OR_RETURN(float* m, c.alloc<float>(rows * nm, "hc mixes"));
  DSV4_CUDA_LAUNCH(f32_linear(h, rows, P.fn, m, c.stream), "f32_linear(hc_fn)",
                   shape_text({{"rows", rows}, {"out", P.fn.out}, {"in", P.fn.in}}));
  DSV4_CUDA_LAUNCH(hc_mix_coefficients(m, h, rows, C, D, P.base, P.scale[0], P.scale[1], P.scale[2], cfg.norm_eps,
                                       cfg.hc_eps, cfg.hc_sinkhorn_iters, mix, c.stream),
                   "hc_mix_coefficients", shape);
  return ok_status();
}

}  // namespace

Status profile_marks_collect(std::vector<ProfileMark>& marks, std::map<std::string, double>* profile) {
  Status st = ok_status();
  for (ProfileMark& m : marks) {
    float ms = 0;
    const Status e = cuda_status(cudaEventElapsedTime(&ms, m.start, m.end), m.name);
    if (e.ok() && profile) (*profile)[m.name] += ms;
    if (!e.ok() && st.ok()) st = e;
    cudaEventDestroy(m.start);
    cudaEventDestroy(m.end);
  }
  marks.clear();
  return st;
}

Status layer_mark_begin(std::vector<LayerMark>& marks, int layer, cudaStream_t s) {
  LayerMark m{layer};
  DSV4_RETURN_IF_ERROR(cuda_status(cudaEventCreate(&m.start), "layer event"));
  if (const Status e = cuda_status(cudaEventCreate(&m.end), "layer event"); !e.ok()) {
    cudaEventDestroy(m.start);
    return e;
  }
  marks.push_back(m);
  return cuda_status(cudaEventRecord(m.start, s), "layer start event");
}

Status layer_mark_end(std::vector<LayerMark>& marks, cudaStream_t s) {
  if (marks.empty()) return error(StatusCode::internal, "layer end event without a start");
  return cuda_status(cudaEventRecord(marks.back().end, s), "layer end event");
}

Status layer_marks_collect(std::vector<LayerMark>& marks, std::vector<double>* ms) {
  Status st = ok_status();
  for (LayerMark& m : marks) {
    float t = 0;
    const Status e = cuda_status(cudaEventElapsedTime(&t, m.start, m.end), "layer time");
    if (e.ok() && ms) {
      if (ms->size() <= static_cast<size_t>(m.layer)) ms->resize(m.layer + 1, 0.0);
      (*ms)[m.layer] += t;
    }
    if (!e.ok() && st.ok()) st = e;
    cudaEventDestroy(m.start);
    cudaEventDestroy(m.end);
  }
  marks.clear();
  return st;
}

Status op_probe(OpCtx& c, const char* op, const float* dev, int64_t n) {
  if (!c.op_probe) return ok_status();
  std::vector<float> v(n);
  DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(v.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost, c.stream), op));
  DSV4_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(c.stream), op));
  (*c.op_probe)(c.layer, op, v);
  return ok_status();
}

Status block_forward(OpCtx& c, const LayerDevice& L, int64_t rows, const AttnFn& attn, const uint8_t* image, float* h,
                     float* pi) {
  return block_forward_rows(c, L, rows, nullptr, rows, attn, image, h, pi);
}

Status block_forward_rows(OpCtx& c, const LayerDevice& L, int64_t rows, const int64_t* keep, int64_t kept,
                          const AttnFn& attn, const uint8_t* image, float* h, float* pi) {
  const family::ModelPlan& cfg = *c.cfg;
  const int C = cfg.hc_mult;
  const int64_t D = cfg.dim, nm = static_cast<int64_t>(C) * (C + 2);
  const auto shape = shape_text({{"rows", rows}, {"D", D}});
  const auto kshape = shape_text({{"rows", kept}, {"D", D}});
  DSV4_ASSIGN_OR_RETURN(float* x, c.alloc<float>(rows * D, "block x"));
  DSV4_ASSIGN_OR_RETURN(float* xn, c.alloc<float>(rows * D, "block xn"));
  DSV4_ASSIGN_OR_RETURN(float* y, c.alloc<float>(kept * D, "block y"));
  DSV4_ASSIGN_OR_RETURN(float* amix, c.alloc<float>(rows * nm, "attention mixes"));
  DSV4_ASSIGN_OR_RETURN(float* fmix, c.alloc<float>(kept * nm, "ffn mixes"));
  // V4.1 collapses each sub-layer with a pre-mix it already holds (the attention with pi, the FFN
  // with the attention's), so a sub-layer's mixes are needed only by its expand: with a side stream
  // they run there beside the collapse and the attention or MoE, which read h and never write it.
  // The same kernels run either way: the bits do not depend on it.
  const bool beside = cfg.premix == family::HcPremix::carried && side_on(c);
  auto start_mixes = [&](const HcDevice& P, int64_t n, float* mix) -> Status {
    if (!beside) return timed(c, "hc mixes", [&] { return mixes(c, P, h, n, mix); });
    return run_beside(c, "hc mixes beside", [&](OpCtx& s) { return mixes(s, P, h, n, mix); });
  };
  // Attention sub-layer, collapsed with the incoming pre-mix.
  DSV4_RETURN_IF_ERROR(start_mixes(L.hc_attn, rows, amix));
  DSV4_RETURN_IF_ERROR(timed(c, "collapse + rmsnorm", [&]() -> Status {
    // V4: each sub-layer collapses with its own pre-mix (model-spec.md §8), the first C of its mix.
    const bool own = cfg.premix == family::HcPremix::own;
    DSV4_CUDA_LAUNCH(hc_collapse_rmsnorm(h, own ? amix : pi, own ? nm : C, rows, C, D, L.attn_norm,
                                         cfg.norm_eps, x, xn, c.stream),
                     "hc_collapse_rmsnorm(attn_norm)", shape);
    return ok_status();
  }));
  DSV4_RETURN_IF_ERROR(op_probe(c, "attn.in", xn, rows * D));
  DSV4_RETURN_IF_ERROR(timed(c, "attention", [&] { return attn(xn, y); }));
  DSV4_RETURN_IF_ERROR(op_probe(c, "attn.out", y, kept * D));
  DSV4_RETURN_IF_ERROR(join_beside(c));
  if (kept == 0) return ok_status();  // no output row (the window keys were all this layer had to give)
  if (keep) {
    // The kept rows of h and of the attention mixes to the front: gathered apart (rows move toward the
    // front, so an in-place gather could overwrite a row before it is read), then copied back. The copies
    // sit where the attention's temporaries were and are released before the MoE's.
    DSV4_RETURN_IF_ERROR(timed(c, "bounded rows", [&]() -> Status {
      const size_t mark = c.scratch->mark();
      DSV4_ASSIGN_OR_RETURN(float* hk, c.alloc<float>(kept * C * D, "kept streams"));
      DSV4_ASSIGN_OR_RETURN(float* mk, c.alloc<float>(kept * nm, "kept mixes"));
      DSV4_CUDA_LAUNCH(gather_rows(h, keep, kept, C * D, hk, c.stream), "gather_rows(h)", kshape);
      DSV4_CUDA_LAUNCH(gather_rows(amix, keep, kept, nm, mk, c.stream), "gather_rows(mixes)", kshape);
      DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(h, hk, kept * C * D * sizeof(float), cudaMemcpyDeviceToDevice,
                                                       c.stream), "copying the kept streams"));
      DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(amix, mk, kept * nm * sizeof(float), cudaMemcpyDeviceToDevice,
                                                       c.stream), "copying the kept mixes"));
      c.scratch->reset(mark);
      return ok_status();
    }));
  }
  rows = kept;
  DSV4_RETURN_IF_ERROR(timed(c, "hc expand", [&]() -> Status {
    DSV4_CUDA_LAUNCH(hc_expand(y, amix, rows, C, D, h, c.stream), "hc_expand(attn)", kshape);
    return ok_status();
  }));
  DSV4_RETURN_IF_ERROR(op_probe(c, "attn.h", h, rows * C * D));
  // FFN sub-layer, collapsed with the attention pre-mix.
  DSV4_RETURN_IF_ERROR(start_mixes(L.hc_ffn, rows, fmix));
  DSV4_RETURN_IF_ERROR(timed(c, "collapse + rmsnorm", [&]() -> Status {
    DSV4_CUDA_LAUNCH(hc_collapse_rmsnorm(h, cfg.premix == family::HcPremix::own ? fmix : amix, nm, rows, C, D, L.ffn_norm, cfg.norm_eps, x, xn,
                                         c.stream),
                     "hc_collapse_rmsnorm(ffn_norm)", kshape);
    return ok_status();
  }));
  DSV4_RETURN_IF_ERROR(op_probe(c, "ffn.in", xn, rows * D));
  MoeOut m;
  DSV4_RETURN_IF_ERROR(moe_forward(c, L.ffn, xn, image, rows, m));
  if (c.op_probe) {  // the combined row, which the fused launch below never stores
    DSV4_CUDA_LAUNCH(moe_combine(m.routed, m.shared, m.sel, m.pair_of, rows, m.K, D, y, c.stream), "moe_combine(probe)", kshape);
    DSV4_RETURN_IF_ERROR(op_probe(c, "ffn.out", y, rows * D));
  }
  DSV4_RETURN_IF_ERROR(join_beside(c));
  // The MoE's combine, the FFN expand and the next pre-mix in one launch.
  return timed(c, "moe combine + hc expand", [&]() -> Status {
    DSV4_CUDA_LAUNCH(moe_combine_expand(m.routed, m.shared, m.sel, m.pair_of, rows, m.K, D, fmix, C, h, pi, c.stream),
                     "moe_combine_expand", kshape);
    return ok_status();
  });
}

Status moe_forward(OpCtx& c, const MoeDevice& M, const float* x, const uint8_t* image, int64_t rows, MoeOut& out) {
  const family::ModelPlan& cfg = *c.cfg;
  const int64_t D = cfg.dim, E = M.n_experts, I = M.inter;
  const int K = M.n_active;
  const int64_t P = rows * K;
  const auto shape = shape_text({{"rows", rows}, {"E", E}, {"K", K}, {"D", D}, {"I", I}});
  DSV4_ASSIGN_OR_RETURN(float* logits, c.alloc<float>(rows * E, "router logits"));
  DSV4_ASSIGN_OR_RETURN(int32_t* sel, c.alloc<int32_t>(P, "router selection"));
  DSV4_ASSIGN_OR_RETURN(float* wts, c.alloc<float>(P, "router weights"));
  DSV4_ASSIGN_OR_RETURN(int32_t* pair_row, c.alloc<int32_t>(P, "pair rows"));
  DSV4_ASSIGN_OR_RETURN(int32_t* pair_expert, c.alloc<int32_t>(P, "pair experts"));
  DSV4_ASSIGN_OR_RETURN(float* pair_weight, c.alloc<float>(P, "pair weights"));
  DSV4_ASSIGN_OR_RETURN(int32_t* pair_of, c.alloc<int32_t>(P, "pair index"));
  DSV4_ASSIGN_OR_RETURN(float* routed, c.alloc<float>(P * D, "routed expert outputs"));
  DSV4_ASSIGN_OR_RETURN(float* scratch, c.alloc<float>(std::max<int64_t>(P * 3 * I, int64_t(exl3_routed_experts_scratch_bytes(P, M.exl3) / sizeof(float)) + 1), "routed expert scratch"));
  // Shared expert: the same clamped SwiGLU, no routing weight. It reads only x, so with a side
  // stream it runs there beside the router and the routed experts (the same kernels either way).
  const int64_t SI = M.shared_w1.out;
  float* so = nullptr;
  auto shared_expert = [&](OpCtx& s) -> Status {
    DSV4_ASSIGN_OR_RETURN(float* a, s.alloc<float>(rows * SI, "shared a"));
    DSV4_ASSIGN_OR_RETURN(float* u, s.alloc<float>(rows * SI, "shared u"));
    DSV4_ASSIGN_OR_RETURN(float* v, s.alloc<float>(rows * SI, "shared v"));
    DSV4_ASSIGN_OR_RETURN(so, s.alloc<float>(rows * D, "shared out"));
    const auto sshape = shape_text({{"rows", rows}, {"I", SI}, {"D", D}});
    DSV4_CUDA_LAUNCH(fp8_linear_pair(x, rows, M.shared_w1, M.shared_w3, cfg.act_block, a, u, s.stream),
                     "fp8_linear_pair(shared.w1, shared.w3)", sshape);
    DSV4_CUDA_LAUNCH(swiglu_rows(a, u, rows, SI, cfg.shared_clamp ? cfg.swiglu_limit : 0.0f, v, s.stream),
                     "swiglu(shared)", sshape);
    DSV4_CUDA_LAUNCH(fp8_linear(v, rows, M.shared_w2, cfg.act_block, so, s.stream), "fp8_linear(shared.w2)", sshape);
    return ok_status();
  };
  if (side_on(c)) {
    DSV4_RETURN_IF_ERROR(run_beside(c, "shared expert beside", shared_expert));
  } else {
    DSV4_RETURN_IF_ERROR(timed(c, "moe shared expert", [&] { return shared_expert(c); }));
  }
  DSV4_RETURN_IF_ERROR(timed(c, "moe router", [&]() -> Status {
    DSV4_CUDA_LAUNCH(f32_linear_either(x, rows, M.gate, M.gate16, logits, c.stream), "f32_linear(router)", shape);
    if (M.tid2eid) {
      if (!c.ids) return error(StatusCode::invalid_argument, "hash-routed MoE needs the call's token ids");
      DSV4_CUDA_LAUNCH(moe_route_hash(logits, rows, E, K, M.tid2eid, c.ids, cfg.route_scale, sel, wts, c.stream),
                       "moe_route_hash", shape);
    } else {
      // The kernels add router_eps only where they normalise: without +1e-20 (V4) the same float for K > 1
      // (sum >= K * sqrt(softplus) > 1e-13); a lone expert normalised (route_norm_always) they do not do.
      if (cfg.route_norm_always && K == 1) return error(StatusCode::unimplemented, "top-1 routing normalised on CUDA");
      if (P <= kFusedRoutePairs) {
        DSV4_CUDA_LAUNCH(moe_route_pairs(logits, rows, E, K, M.bias, M.bias_vl, image, cfg.route_scale, sel, wts,
                                         pair_row, pair_expert, pair_weight, pair_of, c.stream),
                         "moe_route_pairs", shape);
        return ok_status();
      }
      DSV4_CUDA_LAUNCH(moe_route(logits, rows, E, K, M.bias, M.bias_vl, image, cfg.route_scale, sel, wts, c.stream),
                       "moe_route", shape);
    }
    DSV4_ASSIGN_OR_RETURN(int32_t* pair_scratch, c.alloc<int32_t>(moe_pairs_scratch(rows, K, E), "pair counts"));
    DSV4_CUDA_LAUNCH(moe_pairs(sel, wts, rows, K, E, pair_row, pair_expert, pair_weight, pair_of, pair_scratch,
                               c.stream),
                     "moe_pairs", shape);
    return ok_status();
  }));
  if (c.routing_probe) {  // benchmarks: the router's choice (the experts a step touches)
    std::vector<int32_t> v(P);
    DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(v.data(), sel, P * sizeof(int32_t), cudaMemcpyDeviceToHost, c.stream),
                                     "routing probe"));
    DSV4_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(c.stream), "routing probe"));
    (*c.routing_probe)(c.layer, v);
  }
  DSV4_RETURN_IF_ERROR(timed(c, "moe routed experts", [&]() -> Status {
    if (c.collective)  // tensor-parallel: this rank's experts, then every pair's output gathered (tp_forward.h)
      return tp_routed_experts(c, M, x, pair_row, pair_expert, pair_weight, P, scratch, routed);
    DSV4_CUDA_LAUNCH(M.exl3.n_experts ? exl3_routed_experts(x, pair_row, pair_expert, pair_weight, P, M.exl3, cfg.swiglu_limit,
                                                            scratch, routed, c.stream)
                                      : moe_routed_experts(x, pair_row, pair_expert, pair_weight, P, M.w1, M.w3, M.w2, D, I,
                                                           cfg.act_block, cfg.swiglu_limit, scratch, routed, c.stream),
                     "moe_routed_experts", shape);
    return ok_status();
  }));
  DSV4_RETURN_IF_ERROR(join_beside(c));  // the shared expert, when it ran beside
  out = MoeOut{routed, so, sel, pair_of, K};
  return ok_status();
}

Status engram_forward(OpCtx& c, const EngramDevice& E, const uint8_t* codes, const uint8_t* scales,
                      const int64_t* table_rows, int64_t rows, float* h, const uint8_t* image) {
  const family::ModelPlan& cfg = *c.cfg;
  const int C = cfg.hc_mult;
  const int64_t D = cfg.dim, R = E.layout.cols;
  const auto shape = shape_text({{"rows", rows}, {"R", R}, {"dim", E.dim}, {"D", D}});
  DSV4_ASSIGN_OR_RETURN(float* u, c.alloc<float>(rows * R * E.dim, "engram rows"));
  DSV4_ASSIGN_OR_RETURN(float* kv, c.alloc<float>(rows * (C + 1) * D, "engram kv"));
  DSV4_CUDA_LAUNCH(engram_gather(codes, scales, table_rows, rows * R, E.dim, u, c.stream), "engram_gather", shape);
  DSV4_CUDA_LAUNCH(fp8_linear(u, rows, E.wkv, cfg.act_block, kv, c.stream), "fp8_linear(engram.wkv)", shape);
  DSV4_CUDA_LAUNCH(engram_gate(kv, E.qk, rows, C, D, cfg.norm_eps, image, h, c.stream), "engram_gate", shape);
  return ok_status();
}

Status head_logits(OpCtx& c, const float* norm, const F32View& head, const Bf16View& head16, const float* h, const float* pi,
                   const int64_t* index, int64_t n, float* logits, float* collapsed) {
  const family::ModelPlan& cfg = *c.cfg;
  const int C = cfg.hc_mult;
  const int64_t D = cfg.dim;
  const auto shape = shape_text({{"rows", n}, {"V", head.out}, {"D", D}});
  DSV4_ASSIGN_OR_RETURN(float* hs, c.alloc<float>(n * C * D, "head streams"));
  DSV4_ASSIGN_OR_RETURN(float* ps, c.alloc<float>(n * C, "head pre-mix"));
  DSV4_ASSIGN_OR_RETURN(float* x, c.alloc<float>(n * D, "head x"));
  DSV4_ASSIGN_OR_RETURN(float* xn, c.alloc<float>(n * D, "head xn"));
  DSV4_CUDA_LAUNCH(gather_rows(h, index, n, C * D, hs, c.stream), "gather_rows(h)", shape);
  DSV4_CUDA_LAUNCH(gather_rows(pi, index, n, C, ps, c.stream), "gather_rows(pi)", shape);
  DSV4_CUDA_LAUNCH(hc_collapse_rmsnorm(hs, ps, C, n, C, D, norm, cfg.norm_eps, x, xn, c.stream),
                   "hc_collapse_rmsnorm(head)", shape);
  DSV4_CUDA_LAUNCH(f32_linear_either(xn, n, head, head16, logits, c.stream), "f32_linear(head)", shape);
  DSV4_RETURN_IF_ERROR(op_probe(c, "final_norm", xn, n * D));
  if (collapsed)
    DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(collapsed, x, n * D * sizeof(float), cudaMemcpyDeviceToDevice,
                                                     c.stream), "copying the collapsed head rows"));
  return ok_status();
}

}  // namespace dsv4::cuda
