// DSpark ring seeding and block drafting on the device (see dspark_device.h).
#include "backends/cuda/forward/dspark_device.h"

#include <cmath>

#include "backends/cuda/forward/attention_state.h"
#include "backends/cuda/kernels/block/block_ops.cuh"
#include "backends/cuda/runtime/check.h"
#include "backends/cuda/kernels/block/dspark_ops.cuh"
#include "backends/cuda/exl3/exl3_view.h"
#include "backends/cuda/kernels/linear/linear.cuh"
#include "backends/cuda/tp/tp_forward.h"

namespace dsv4::cuda {

int64_t dspark_scratch_bytes(const family::ModelPlan& cfg) {
  const int64_t B = cfg.dspark_block, D = cfg.dim, C = cfg.hc_mult, Hd = static_cast<int64_t>(cfg.n_heads) * cfg.head_dim;
  const int64_t I = cfg.moe_inter, K = std::max(cfg.n_active, cfg.dspark_active);
  const int64_t E = std::max<int64_t>(cfg.n_experts, cfg.dspark_experts);
  int64_t f = B * (C * D + C) + 8 * B * D + 4 * B * Hd + 2 * B * cfg.q_lora + B * cfg.o_groups * cfg.o_lora;
  f += B * E + 8 * B * K + B * K * (D + 3 * I) + 3 * B * I + B * (C * D + cfg.vocab * 2) + 4 * cfg.window;
  f += 3 * cfg.vocab + 2 * (D + cfg.dspark_markov_rank) + 64 * B * C * (C + 2);
  return f * 4 + (16 << 20);
}

namespace {

// kv_norm(wkv x) of `rows` rows of one stage: bf16 [rows, d] before RoPE.
Status stage_key_rows(OpCtx& c, const AttentionDevice& A, const float* x, int64_t rows, float* kn) {
  const family::ModelPlan& cfg = *c.cfg;
  const int64_t d = cfg.head_dim;
  DSV4_ASSIGN_OR_RETURN(float* kv, c.alloc<float>(rows * d, "DSpark stage kv"));
  const auto shape = shape_text({{"rows", rows}, {"d", d}, {"D", cfg.dim}});
  DSV4_CUDA_LAUNCH(fp8_linear(x, rows, A.wkv, cfg.act_block, kv, c.stream), "fp8_linear(mtp.wkv)", shape);
  DSV4_CUDA_LAUNCH(rmsnorm_rows(kv, rows, d, A.kv_norm, cfg.norm_eps, kn, c.stream), "rmsnorm(mtp.kv_norm)", shape);
  return ok_status();
}

}  // namespace

Status dspark_write_rings(OpCtx& c, const ModelDevice& M, const std::vector<DevicePiece>& pieces, const int64_t* pos,
                          int64_t rows, const float* taps) {
  const family::ModelPlan& cfg = *c.cfg;
  const DsparkDevice& S = *M.dspark;
  const int64_t D = cfg.dim, d = cfg.head_dim;
  const auto shape = shape_text({{"rows", rows}, {"D", D}});
  DSV4_ASSIGN_OR_RETURN(float* mp, c.alloc<float>(rows * D, "DSpark main_proj"));
  DSV4_ASSIGN_OR_RETURN(float* main_x, c.alloc<float>(rows * D, "DSpark main rows"));
  DSV4_ASSIGN_OR_RETURN(float* kn, c.alloc<float>(rows * d, "DSpark keys"));
  DSV4_CUDA_LAUNCH(fp8_linear(taps, rows, S.main_proj, cfg.act_block, mp, c.stream), "fp8_linear(mtp.main_proj)", shape);
  DSV4_CUDA_LAUNCH(rmsnorm_rows(mp, rows, D, S.main_norm, cfg.norm_eps, main_x, c.stream), "rmsnorm(mtp.main_norm)", shape);
  for (size_t st = 0; st < S.stages.size(); ++st) {
    DSV4_RETURN_IF_ERROR(stage_key_rows(c, S.attention[st], main_x, rows, kn));
    for (const DevicePiece& p : pieces) {
      const int64_t cap = p.caches->geometry().ring_capacity;
      const int64_t keep = std::min<int64_t>(p.T, cap);
      DSV4_CUDA_LAUNCH(dspark_pack_keys(kn, M.d_freqs_plain, pos, p.row0 + p.T - keep, keep, d, cfg.rope_dim, cap,
                                        p.caches->dspark_ring(static_cast<int>(st)), nullptr, c.stream),
                       "dspark_pack_keys(ring)", shape_text({{"rows", keep}, {"d", d}, {"stage", static_cast<int64_t>(st)}}));
    }
  }
  return ok_status();
}

StatusOr<engine::DraftResult> dspark_draft(OpCtx& c, const ModelDevice& M, const StreamCaches& caches, int32_t next) {
  const family::ModelPlan& cfg = *c.cfg;
  const DsparkDevice& S = *M.dspark;
  const int64_t B = cfg.dspark_block, D = cfg.dim, d = cfg.head_dim, H = cfg.n_heads, V = cfg.vocab;
  const int64_t R = cfg.dspark_markov_rank, win = cfg.window, C = cfg.hc_mult;
  const int64_t p = caches.length() - 1, cap = caches.geometry().ring_capacity;
  const int64_t G = cfg.o_groups, O = cfg.o_lora, gin = H * d / G;
  std::vector<int32_t> ids(B, cfg.dspark_noise_token);
  ids[0] = next;
  std::vector<int64_t> pos(B);
  for (int64_t i = 0; i < B; ++i) pos[i] = p + 1 + i;
  // Ring slots in the reference's order: entry k holds the position q in (p - win, p] with q = k mod win.
  const int64_t nring = std::min<int64_t>(win, p + 1);
  std::vector<int64_t> slots(nring);
  for (int64_t k = 0; k < nring; ++k) slots[k] = (p - ((p - k) % win + win) % win) % cap;
  DSV4_ASSIGN_OR_RETURN(int32_t* d_ids, c.alloc<int32_t>(B, "draft ids"));
  DSV4_ASSIGN_OR_RETURN(int64_t* d_pos, c.alloc<int64_t>(B, "draft positions"));
  DSV4_ASSIGN_OR_RETURN(int64_t* d_slots, c.alloc<int64_t>(nring, "draft ring slots"));
  DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(d_ids, ids.data(), B * 4, cudaMemcpyHostToDevice, c.stream), "draft ids"));
  DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(d_pos, pos.data(), B * 8, cudaMemcpyHostToDevice, c.stream), "draft pos"));
  DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(d_slots, slots.data(), nring * 8, cudaMemcpyHostToDevice, c.stream),
                                   "draft slots"));
  DSV4_ASSIGN_OR_RETURN(float* h, c.alloc<float>(B * C * D, "draft streams"));
  DSV4_ASSIGN_OR_RETURN(float* pi, c.alloc<float>(B * C, "draft pre-mix"));
  DSV4_RETURN_IF_ERROR(embed_rows(c, M, d_ids, B, h, pi).with_context("the draft's embedding"));
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  for (size_t st = 0; st < S.stages.size(); ++st) {
    const AttentionDevice& A = S.attention[st];
    const uint8_t* ring = caches.dspark_ring(static_cast<int>(st));
    const auto shape = shape_text({{"rows", B}, {"H", H}, {"d", d}, {"stage", static_cast<int64_t>(st)}});
    AttnFn attn = [&](const float* x, float* y) -> Status {
      DSV4_ASSIGN_OR_RETURN(float* qa, c.alloc<float>(B * cfg.q_lora, "draft qa"));
      DSV4_ASSIGN_OR_RETURN(float* qr, c.alloc<float>(B * cfg.q_lora, "draft qr"));
      DSV4_ASSIGN_OR_RETURN(float* q, c.alloc<float>(B * H * d, "draft q"));
      DSV4_ASSIGN_OR_RETURN(float* o, c.alloc<float>(B * H * d, "draft o"));
      DSV4_ASSIGN_OR_RETURN(float* kn, c.alloc<float>(B * d, "draft kn"));
      DSV4_ASSIGN_OR_RETURN(float* keys, c.alloc<float>(B * d, "draft keys"));
      DSV4_ASSIGN_OR_RETURN(float* z, c.alloc<float>(B * G * O, "draft z"));
      DSV4_CUDA_LAUNCH(fp8_linear(x, B, A.wq_a, cfg.act_block, qa, c.stream), "fp8_linear(mtp.wq_a)", shape);
      DSV4_CUDA_LAUNCH(rmsnorm_rows(qa, B, cfg.q_lora, A.q_norm, cfg.norm_eps, qr, c.stream), "rmsnorm(mtp.q_norm)", shape);
      DSV4_CUDA_LAUNCH(fp8_linear(qr, B, A.wq_b, cfg.act_block, q, c.stream), "fp8_linear(mtp.wq_b)", shape);
      DSV4_RETURN_IF_ERROR(stage_key_rows(c, A, x, B, kn));
      DSV4_CUDA_LAUNCH(dspark_pack_keys(kn, M.d_freqs_plain, d_pos, 0, B, d, cfg.rope_dim, cap, nullptr, keys, c.stream),
                       "dspark_pack_keys(draft)", shape);
      DSV4_CUDA_LAUNCH(rope_head_tails(q, B, static_cast<int>(H), d, cfg.rope_dim, M.d_freqs_plain, d_pos, false, c.stream),
                       "rope_head_tails(q)", shape);
      DSV4_CUDA_LAUNCH(dspark_attend(q, ring, d_slots, static_cast<int>(nring), d + d / 32, keys, static_cast<int>(B),
                                     static_cast<int>(H), d, scale, A.sink, o, c.stream),
                       "dspark_attend", shape);
      DSV4_CUDA_LAUNCH(rope_head_tails(o, B, static_cast<int>(H), d, cfg.rope_dim, M.d_freqs_plain, d_pos, true, c.stream),
                       "rope_head_tails(o, inverse)", shape);
      DSV4_CUDA_LAUNCH(A.wo_a.exl3 ? exl3_linear(o, B, *A.wo_a.exl3, z, Exl3Out::bf16, c.stream)
                                   : grouped_wo_a(o, A.wo_a.w, B, static_cast<int>(G), O, gin, z, c.stream), "grouped_wo_a(mtp)", shape);
      if (c.collective) {  // a tensor-parallel rank: every rank's groups side by side for the whole wo_b
        DSV4_ASSIGN_OR_RETURN(z, tp_gather_groups(c, z, B, G * O));
      }
      DSV4_CUDA_LAUNCH(fp8_linear(z, B, A.wo_b, cfg.act_block, y, c.stream), "fp8_linear(mtp.wo_b)", shape);
      return ok_status();
    };
    const size_t mark = c.scratch->mark();
    DSV4_RETURN_IF_ERROR(block_forward(c, S.stages[st], B, attn, nullptr, h, pi));
    c.scratch->reset(mark);
  }
  // Head on all rows, then the Markov bias and the greedy chain, row by row on the device.
  std::vector<int64_t> index(B);
  for (int64_t i = 0; i < B; ++i) index[i] = i;
  DSV4_ASSIGN_OR_RETURN(int64_t* d_index, c.alloc<int64_t>(B, "draft head rows"));
  DSV4_ASSIGN_OR_RETURN(float* logits, c.alloc<float>(B * V, "draft logits"));
  DSV4_ASSIGN_OR_RETURN(float* xh, c.alloc<float>(B * D, "draft collapsed rows"));
  DSV4_ASSIGN_OR_RETURN(float* bias, c.alloc<float>(V, "markov bias"));
  DSV4_ASSIGN_OR_RETURN(float* cat, c.alloc<float>(D + R, "confidence input"));
  DSV4_ASSIGN_OR_RETURN(int32_t* toks, c.alloc<int32_t>(B + 1, "draft tokens"));
  DSV4_ASSIGN_OR_RETURN(float* probs, c.alloc<float>(B, "draft probabilities"));
  DSV4_ASSIGN_OR_RETURN(float* conf, c.alloc<float>(4 * B, "draft confidence"));  // 16-byte slots
  DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(d_index, index.data(), B * 8, cudaMemcpyHostToDevice, c.stream), "draft rows"));
  DSV4_RETURN_IF_ERROR(c.collective ? tp_head_logits(c, S.norm, M.head, M.head16, h, pi, d_index, B, logits, xh)
                                    : head_logits(c, S.norm, M.head, M.head16, h, pi, d_index, B, logits, xh));
  DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(toks, &ids[0], 4, cudaMemcpyHostToDevice, c.stream), "draft anchor"));
  const auto mshape = shape_text({{"V", V}, {"R", R}});
  for (int64_t i = 0; i < B; ++i) {
    float* e = cat + D;
    DSV4_CUDA_LAUNCH(markov_embed_row(S.markov_embed, toks + i, R, e, c.stream), "markov_embed_row", mshape);
    DSV4_CUDA_LAUNCH(f32_linear_either(e, 1, S.markov_head, S.markov_head16, bias, c.stream), "f32_linear(markov_head)",
                     mshape);
    DSV4_CUDA_LAUNCH(markov_pick(logits + i * V, bias, V, toks + i + 1, probs + i, c.stream), "markov_pick", mshape);
    DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(cat, xh + i * D, D * 4, cudaMemcpyDeviceToDevice, c.stream),
                                     "confidence input"));
    DSV4_CUDA_LAUNCH(f32_linear(cat, 1, S.confidence, conf + 4 * i, c.stream), "f32_linear(confidence)", mshape);
  }
  engine::DraftResult out;
  out.tokens.resize(B + 1);
  out.probs.resize(B);
  std::vector<float> conf_host(4 * B);
  out.logits.resize(B * V);
  DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(out.tokens.data(), toks, (B + 1) * 4, cudaMemcpyDeviceToHost, c.stream), "draft tokens"));
  DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(out.probs.data(), probs, B * 4, cudaMemcpyDeviceToHost, c.stream), "draft probs"));
  DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(conf_host.data(), conf, 4 * B * 4, cudaMemcpyDeviceToHost, c.stream), "draft confidence"));
  DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(out.logits.data(), logits, B * V * 4, cudaMemcpyDeviceToHost, c.stream), "draft logits"));
  DSV4_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(c.stream), "after the draft"));
  out.tokens.erase(out.tokens.begin());  // toks[0] is the anchor
  for (int64_t i = 0; i < B; ++i) out.confidence.push_back(conf_host[4 * i]);
  return out;
}

}  // namespace dsv4::cuda
