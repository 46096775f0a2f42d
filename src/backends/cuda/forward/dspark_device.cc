// DSpark ring seeding and block drafting on the device (see dspark_device.h).
#include "backends/cuda/forward/dspark_device.h"

#include <algorithm>
#include <cmath>
#include <span>

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

namespace {

size_t pad256(size_t n) { return (n + 255) / 256 * 256; }

// Where a group of n drafts keeps its tables and results, in the pinned host bytes and (the same offsets up to
// `end`) in its device copy: the inputs [0, toks) go up in one copy; toks (in: each stream's anchor at column 0),
// probs and confidence come back in one copy of [toks, end); the logits follow at `logits` (host only).
struct GroupLayout {
  size_t ids = 0, pos = 0, slots = 0, slot_begin = 0, rings = 0, index = 0;  // inputs
  size_t toks = 0, probs = 0, conf = 0, end = 0;                              // int32 [n, B+1], f32 [n, B], f32 [B, n]
  size_t logits = 0, total = 0;
};

GroupLayout group_layout(const family::ModelPlan& cfg, int64_t n, bool logits) {
  const size_t B = static_cast<size_t>(cfg.dspark_block), W = static_cast<size_t>(cfg.window);
  const size_t N = static_cast<size_t>(n), S = static_cast<size_t>(cfg.dspark_stages);
  GroupLayout L;
  size_t at = 0;
  auto part = [&](size_t& off, size_t bytes) { off = at; at += pad256(bytes); };
  part(L.ids, N * B * 4);
  part(L.pos, N * B * 8);
  part(L.slots, N * W * 8);
  part(L.slot_begin, (N + 1) * 4);
  part(L.rings, S * N * sizeof(void*));
  part(L.index, N * B * 8);
  part(L.toks, N * (B + 1) * 4);
  part(L.probs, N * B * 4);
  part(L.conf, N * B * 4);
  L.end = at;
  part(L.logits, logits ? N * B * static_cast<size_t>(cfg.vocab) * 4 : 0);
  L.total = at;
  return L;
}

// Scratch floats one stream adds to a group (an upper bound): the streams and tables for the whole draft, a stage's
// work (freed after each stage), the head with the Markov chain and the confidence inputs, and on a tensor-parallel
// rank of `world` the gathers (embedding rows, expert outputs, output groups, head logits).
int64_t group_stream_floats(const family::ModelPlan& cfg, int32_t world) {
  const int64_t B = cfg.dspark_block, D = cfg.dim, C = cfg.hc_mult, Hd = static_cast<int64_t>(cfg.n_heads) * cfg.head_dim;
  const int64_t I = cfg.moe_inter, K = std::max(cfg.n_active, cfg.dspark_active), d = cfg.head_dim;
  const int64_t E = std::max<int64_t>(cfg.n_experts, cfg.dspark_experts), V = cfg.vocab, R = cfg.dspark_markov_rank;
  const int64_t GO = static_cast<int64_t>(cfg.o_groups) * cfg.o_lora;
  const int64_t tables = 8 * B + 2 * cfg.window + 2 * cfg.dspark_stages + 3;
  const int64_t keep = B * (C * D + C) + tables;
  const int64_t stage = 2 * B * cfg.q_lora + 4 * B * Hd + 3 * B * d + B * GO + 8 * B * D + B * E + 8 * B * K +
                        B * K * (D + 3 * I) + 3 * B * I + 64 * B * C * (C + 2);
  const int64_t head = 2 * B + B * (C * D + C + 4 * D + V) + V + B * R + B * (D + R) + B;
  const int64_t w = world;
  const int64_t gathers = w > 1 ? B * ((w + 1) * D + (w + 1) * K * D + K + 2 * w * GO + 2 * V) : 0;
  return keep + stage + head + gathers;
}

constexpr int64_t kGroupFixedBytes = (16 << 20) + 16 * 256;

}  // namespace

size_t dspark_draft_host_bytes(const family::ModelPlan& cfg, int64_t n, bool logits) {
  return group_layout(cfg, n, logits).total;
}

int64_t dspark_group_streams(const family::ModelPlan& cfg, int64_t bytes, int32_t world) {
  const int64_t per = group_stream_floats(cfg, world) * 4;
  return std::max<int64_t>(1, (bytes - kGroupFixedBytes) / std::max<int64_t>(per, 1));
}

Status dspark_draft_enqueue(OpCtx& c, const ModelDevice& M, std::span<const DraftStream> group, bool with_logits,
                            uint8_t* host) {
  const family::ModelPlan& cfg = *c.cfg;
  const DsparkDevice& S = *M.dspark;
  const int64_t N = static_cast<int64_t>(group.size());
  if (N == 0) return ok_status();
  const int64_t B = cfg.dspark_block, D = cfg.dim, d = cfg.head_dim, H = cfg.n_heads, V = cfg.vocab;
  const int64_t R = cfg.dspark_markov_rank, win = cfg.window, rows = N * B;
  const int64_t G = cfg.o_groups, O = cfg.o_lora, gin = H * d / G;
  const size_t n_stages = S.stages.size();
  const GroupLayout L = group_layout(cfg, N, with_logits);
  // The group's tables, staged in pinned memory. Row n * B + i is stream n's draft row i at position p_n + 1 + i
  // (row 0 feeds `next`, the others the noise token); stream n's ring slots, in the reference's order: entry k holds
  // the position q in (p - win, p] with q = k mod win.
  auto* ids = reinterpret_cast<int32_t*>(host + L.ids);
  auto* pos = reinterpret_cast<int64_t*>(host + L.pos);
  auto* slots = reinterpret_cast<int64_t*>(host + L.slots);
  auto* slot_begin = reinterpret_cast<int32_t*>(host + L.slot_begin);
  auto* rings = reinterpret_cast<const uint8_t**>(host + L.rings);
  auto* index = reinterpret_cast<int64_t*>(host + L.index);
  auto* toks = reinterpret_cast<int32_t*>(host + L.toks);
  int32_t at = 0;
  for (int64_t n = 0; n < N; ++n) {
    const StreamCaches& caches = *group[n].caches;
    const int64_t p = caches.length() - 1, cap = caches.geometry().ring_capacity;
    for (int64_t i = 0; i < B; ++i) {
      ids[n * B + i] = i == 0 ? group[n].next : cfg.dspark_noise_token;
      pos[n * B + i] = p + 1 + i;
      index[n * B + i] = n * B + i;
    }
    const int64_t nring = std::min<int64_t>(win, p + 1);
    slot_begin[n] = at;
    for (int64_t k = 0; k < nring; ++k) slots[at++] = (p - ((p - k) % win + win) % win) % cap;
    for (size_t st = 0; st < n_stages; ++st) rings[st * N + n] = caches.dspark_ring(static_cast<int>(st));
    for (int64_t i = 0; i <= B; ++i) toks[n * (B + 1) + i] = i == 0 ? group[n].next : 0;
  }
  slot_begin[N] = at;
  DSV4_ASSIGN_OR_RETURN(uint8_t* dev, c.alloc<uint8_t>(static_cast<int64_t>(L.end), "draft tables"));
  DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(dev, host, L.probs, cudaMemcpyHostToDevice, c.stream), "draft tables"));
  const auto* d_ids = reinterpret_cast<const int32_t*>(dev + L.ids);
  const auto* d_pos = reinterpret_cast<const int64_t*>(dev + L.pos);
  const auto* d_slots = reinterpret_cast<const int64_t*>(dev + L.slots);
  const auto* d_slot_begin = reinterpret_cast<const int32_t*>(dev + L.slot_begin);
  const auto* d_rings = reinterpret_cast<const uint8_t* const*>(dev + L.rings);
  const auto* d_index = reinterpret_cast<const int64_t*>(dev + L.index);
  auto* d_toks = reinterpret_cast<int32_t*>(dev + L.toks);
  auto* d_probs = reinterpret_cast<float*>(dev + L.probs);
  auto* d_conf = reinterpret_cast<float*>(dev + L.conf);
  DSV4_ASSIGN_OR_RETURN(float* h, c.alloc<float>(rows * cfg.hc_mult * D, "draft streams"));
  DSV4_ASSIGN_OR_RETURN(float* pi, c.alloc<float>(rows * cfg.hc_mult, "draft pre-mix"));
  DSV4_RETURN_IF_ERROR(embed_rows(c, M, d_ids, rows, h, pi).with_context("the draft's embedding"));
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  for (size_t st = 0; st < n_stages; ++st) {
    const AttentionDevice& A = S.attention[st];
    const uint8_t* const* stage_rings = d_rings + st * N;
    const auto shape = shape_text({{"streams", N}, {"rows", rows}, {"H", H}, {"d", d}, {"stage", static_cast<int64_t>(st)}});
    AttnFn attn = [&](const float* x, float* y) -> Status {
      DSV4_ASSIGN_OR_RETURN(float* qa, c.alloc<float>(rows * cfg.q_lora, "draft qa"));
      DSV4_ASSIGN_OR_RETURN(float* qr, c.alloc<float>(rows * cfg.q_lora, "draft qr"));
      DSV4_ASSIGN_OR_RETURN(float* q, c.alloc<float>(rows * H * d, "draft q"));
      DSV4_ASSIGN_OR_RETURN(float* o, c.alloc<float>(rows * H * d, "draft o"));
      DSV4_ASSIGN_OR_RETURN(float* kn, c.alloc<float>(rows * d, "draft kn"));
      DSV4_ASSIGN_OR_RETURN(float* keys, c.alloc<float>(rows * d, "draft keys"));
      DSV4_ASSIGN_OR_RETURN(float* z, c.alloc<float>(rows * G * O, "draft z"));
      DSV4_CUDA_LAUNCH(fp8_linear(x, rows, A.wq_a, cfg.act_block, qa, c.stream), "fp8_linear(mtp.wq_a)", shape);
      DSV4_CUDA_LAUNCH(rmsnorm_rows(qa, rows, cfg.q_lora, A.q_norm, cfg.norm_eps, qr, c.stream), "rmsnorm(mtp.q_norm)", shape);
      DSV4_CUDA_LAUNCH(fp8_linear(qr, rows, A.wq_b, cfg.act_block, q, c.stream), "fp8_linear(mtp.wq_b)", shape);
      DSV4_RETURN_IF_ERROR(stage_key_rows(c, A, x, rows, kn));
      // cap only places ring rows; the draft's own keys go to `keys` alone.
      DSV4_CUDA_LAUNCH(dspark_pack_keys(kn, M.d_freqs_plain, d_pos, 0, rows, d, cfg.rope_dim, 1, nullptr, keys, c.stream),
                       "dspark_pack_keys(draft)", shape);
      DSV4_CUDA_LAUNCH(rope_head_tails(q, rows, static_cast<int>(H), d, cfg.rope_dim, M.d_freqs_plain, d_pos, false, c.stream),
                       "rope_head_tails(q)", shape);
      DSV4_CUDA_LAUNCH(dspark_attend(q, stage_rings, d_slots, d_slot_begin, d + d / 32, keys, static_cast<int>(N),
                                     static_cast<int>(B), static_cast<int>(H), d, scale, A.sink, o, c.stream),
                       "dspark_attend", shape);
      DSV4_CUDA_LAUNCH(rope_head_tails(o, rows, static_cast<int>(H), d, cfg.rope_dim, M.d_freqs_plain, d_pos, true, c.stream),
                       "rope_head_tails(o, inverse)", shape);
      DSV4_CUDA_LAUNCH(A.wo_a.exl3 ? exl3_linear(o, rows, *A.wo_a.exl3, z, Exl3Out::bf16, c.stream)
                                   : grouped_wo_a(o, A.wo_a.w, rows, static_cast<int>(G), O, gin, z, c.stream),
                       "grouped_wo_a(mtp)", shape);
      if (c.collective) {  // a tensor-parallel rank: every rank's groups side by side for the whole wo_b
        DSV4_ASSIGN_OR_RETURN(z, tp_gather_groups(c, z, rows, G * O));
      }
      DSV4_CUDA_LAUNCH(fp8_linear(z, rows, A.wo_b, cfg.act_block, y, c.stream), "fp8_linear(mtp.wo_b)", shape);
      return ok_status();
    };
    const size_t mark = c.scratch->mark();
    DSV4_RETURN_IF_ERROR(block_forward(c, S.stages[st], rows, attn, nullptr, h, pi));
    c.scratch->reset(mark);
  }
  // The head on every row, then the Markov chain: step i biases row i of every stream by the Markov head of its
  // token i (the anchor, then its draft i - 1) and picks draft i, all streams in one launch each.
  DSV4_ASSIGN_OR_RETURN(float* logits, c.alloc<float>(rows * V, "draft logits"));
  DSV4_ASSIGN_OR_RETURN(float* xh, c.alloc<float>(rows * D, "draft collapsed rows"));
  DSV4_ASSIGN_OR_RETURN(float* bias, c.alloc<float>(N * V, "markov bias"));
  DSV4_ASSIGN_OR_RETURN(float* e, c.alloc<float>(B * N * R, "markov embeddings"));  // [B, N, R]: step-major
  DSV4_ASSIGN_OR_RETURN(float* cat, c.alloc<float>(B * N * (D + R), "confidence input"));  // [B, N, D + R]
  DSV4_RETURN_IF_ERROR(c.collective ? tp_head_logits(c, S.norm, M.head, M.head16, h, pi, d_index, rows, logits, xh)
                                    : head_logits(c, S.norm, M.head, M.head16, h, pi, d_index, rows, logits, xh));
  const auto mshape = shape_text({{"streams", N}, {"V", V}, {"R", R}});
  for (int64_t i = 0; i < B; ++i) {
    float* ei = e + i * N * R;
    DSV4_CUDA_LAUNCH(markov_embed_rows(S.markov_embed, d_toks + i, B + 1, N, R, ei, c.stream), "markov_embed_rows", mshape);
    DSV4_CUDA_LAUNCH(f32_linear_either(ei, N, S.markov_head, S.markov_head16, bias, c.stream), "f32_linear(markov_head)",
                     mshape);
    DSV4_CUDA_LAUNCH(markov_pick(logits + i * V, B * V, bias, V, N, d_toks + i + 1, B + 1, d_probs + i, B, c.stream),
                     "markov_pick", mshape);
    // Confidence input row (i, n) = [collapsed row n * B + i ; markov embedding of stream n's token i].
    DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpy2DAsync(cat + i * N * (D + R), (D + R) * 4, xh + i * D, B * D * 4, D * 4, N,
                                                       cudaMemcpyDeviceToDevice, c.stream),
                                     "confidence input"));
  }
  DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpy2DAsync(cat + D, (D + R) * 4, e, R * 4, R * 4, B * N,
                                                     cudaMemcpyDeviceToDevice, c.stream),
                                   "confidence input"));
  DSV4_CUDA_LAUNCH(f32_linear(cat, B * N, S.confidence, d_conf, c.stream), "f32_linear(confidence)", mshape);
  DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(host + L.toks, dev + L.toks, L.end - L.toks, cudaMemcpyDeviceToHost,
                                                   c.stream), "draft results"));
  if (with_logits) {
    DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(host + L.logits, logits, rows * V * 4, cudaMemcpyDeviceToHost,
                                                     c.stream), "draft logits"));
  }
  return ok_status();
}

void dspark_draft_results(const family::ModelPlan& cfg, int64_t n, bool logits, const uint8_t* host,
                          std::vector<engine::DraftResult>* out) {
  const GroupLayout L = group_layout(cfg, n, logits);
  const int64_t B = cfg.dspark_block, V = cfg.vocab;
  const auto* toks = reinterpret_cast<const int32_t*>(host + L.toks);
  const auto* probs = reinterpret_cast<const float*>(host + L.probs);
  const auto* conf = reinterpret_cast<const float*>(host + L.conf);
  const auto* lg = reinterpret_cast<const float*>(host + L.logits);
  for (int64_t s = 0; s < n; ++s) {
    engine::DraftResult r;
    r.tokens.assign(toks + s * (B + 1) + 1, toks + (s + 1) * (B + 1));  // column 0 is the anchor
    r.probs.assign(probs + s * B, probs + (s + 1) * B);
    for (int64_t i = 0; i < B; ++i) r.confidence.push_back(conf[i * n + s]);
    if (logits) r.logits.assign(lg + s * B * V, lg + (s + 1) * B * V);
    out->push_back(std::move(r));
  }
}

}  // namespace dsv4::cuda
