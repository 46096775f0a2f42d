// DSpark ring seeding and block drafting (see dspark.h).
#include "backends/cpu/dspark.h"

#include <cmath>

#include "backends/cpu/attention.h"
#include "backends/cpu/block.h"
#include "backends/cpu/head.h"
#include "backends/cpu/kv_rows.h"
#include "backends/cpu/rope.h"

namespace dsv4::cpu {

namespace {
// Window key of a stage for one row: RoPE(kv_norm(wkv x)) at pos, packed FP8.
template <typename Acc>
void stage_keys(ThreadPool& pool, const family::ModelPlan& cfg, const family::LayerWeights& A,
                const std::vector<float>& freqs, const float* x, int64_t rows, const int64_t* pos,
                Vec& keys, std::vector<uint8_t>& packed) {
  const int64_t d = cfg.head_dim, rb = kv_row_bytes(KvRowFormat::fp8_ue8m0_32, d);
  Vec kv(rows * d);
  keys.resize(rows * d);
  packed.resize(rows * rb);
  fp8_linear<Acc>(pool, x, rows, A.wkv, kv.data(), cfg.act_block);
  rmsnorm_rows<Acc>(kv.data(), rows, d, floats(A.kv_norm).data(), cfg.norm_eps, keys.data());
  for (int64_t r = 0; r < rows; ++r) {
    rope_apply<Acc>(&keys[r * d + d - cfg.rope_dim], freqs, pos[r], false);
    pack_row(KvRowFormat::fp8_ue8m0_32, &keys[r * d], d, &packed[r * rb]);
    unpack_row(KvRowFormat::fp8_ue8m0_32, &packed[r * rb], d, &keys[r * d]);
  }
}
}  // namespace

template <typename Acc>
void dspark_write_rings(CallCtx& c, const Vec& taps) {
  const family::ModelPlan& cfg = *c.cfg;
  const std::vector<family::LayerWeights>& S = c.M->weights.dspark;
  const int64_t rows = c.rows, D = cfg.dim;
  Vec mp(rows * D), main_x(rows * D);
  fp8_linear<Acc>(*c.pool, taps.data(), rows, S[0].main_proj, mp.data(), cfg.act_block);
  rmsnorm_rows<Acc>(mp.data(), rows, D, floats(S[0].main_norm).data(), cfg.norm_eps, main_x.data());
  for (size_t st = 0; st < S.size(); ++st) {
    Vec keys;
    std::vector<uint8_t> packed;
    stage_keys<Acc>(*c.pool, cfg, S[st], *c.freqs_plain, main_x.data(), rows, c.pos.data(), keys, packed);
    for (const PieceCtx& pc : c.pieces) {
      const int64_t keep = std::min<int64_t>(pc.T, c.geo->ring_capacity);
      for (int64_t i = pc.T - keep; i < pc.T; ++i) {
        const int64_t slot = (pc.start + i) % c.geo->ring_capacity, rb = c.geo->window_row;
        std::copy(&packed[(pc.row0 + i) * rb], &packed[(pc.row0 + i + 1) * rb],
                  &pc.state->dspark_rings[st][slot * rb]);
      }
    }
  }
}

template <typename Acc>
DraftResult dspark_draft(ThreadPool& pool, const family::Model& M, const family::ModelPlan& cfg, const StateGeometry& geo,
                         const std::vector<float>& freqs, const StreamState& s, int32_t next) {
  const std::vector<family::LayerWeights>& S = M.weights.dspark;
  const family::LayerWeights& last = S.back();
  const int64_t B = cfg.dspark_block, D = cfg.dim, d = cfg.head_dim, H = cfg.n_heads, V = cfg.vocab;
  const int64_t p = s.length - 1, win = cfg.window;
  std::vector<int32_t> ids(B, cfg.dspark_noise_token);
  ids[0] = next;
  std::vector<int64_t> pos(B);
  for (int64_t i = 0; i < B; ++i) pos[i] = p + 1 + i;
  std::vector<float> h;
  std::vector<std::vector<Acc>> pi;
  embed_rows<Acc>(cfg, M.weights.embed, ids.data(), B, h, pi);
  const Acc scale = static_cast<Acc>(1.0 / std::sqrt(static_cast<double>(d)));
  for (size_t st = 0; st < S.size(); ++st) {
    const family::LayerWeights& A = S[st];
    const Vec sink = floats(A.attn_sink);
    // The ring in the reference's slot order: slot k of a `win`-slot ring holds the position
    // q in (p - win, p] with q mod win == k; only slots 0 .. min(win, p+1)-1 are listed.
    const std::vector<uint8_t>& ring = s.dspark_rings[st];
    const int64_t nring = std::min<int64_t>(win, p + 1);
    Vec ring_keys(nring * d);
    for (int64_t k = 0; k < nring; ++k) {
      const int64_t q = p - ((p - k) % win + win) % win;
      unpack_row(KvRowFormat::fp8_ue8m0_32, &ring[(q % geo.ring_capacity) * geo.window_row], d, &ring_keys[k * d]);
    }
    auto attn = [&](const float* x, float* y) {
      Vec qa(B * cfg.q_lora), qr(B * cfg.q_lora), q(B * H * d), o(B * H * d), keys;
      std::vector<uint8_t> packed;
      fp8_linear<Acc>(pool, x, B, A.wq_a, qa.data(), cfg.act_block);
      rmsnorm_rows<Acc>(qa.data(), B, cfg.q_lora, floats(A.q_norm).data(), cfg.norm_eps, qr.data());
      fp8_linear<Acc>(pool, qr.data(), B, A.wq_b, q.data(), cfg.act_block);
      stage_keys<Acc>(pool, cfg, A, freqs, x, B, pos.data(), keys, packed);
      std::vector<const float*> list;
      for (int64_t k = 0; k < nring; ++k) list.push_back(&ring_keys[k * d]);
      for (int64_t i = 0; i < B; ++i) list.push_back(&keys[i * d]);
      pool.parallel_for(B * H, [&](int64_t b, int64_t e) {
        for (int64_t ih = b; ih < e; ++ih) {
          const int64_t i = ih / H, hh = ih % H;
          float* qh = &q[(i * H + hh) * d];
          rope_apply<Acc>(qh + d - cfg.rope_dim, freqs, pos[i], false);
          sparse_attend_head<Acc>(qh, list, d, scale, sink[hh], &o[(i * H + hh) * d]);
          rope_apply<Acc>(&o[(i * H + hh) * d + d - cfg.rope_dim], freqs, pos[i], true);
        }
      }, 1);
      attention_output<Acc>(pool, A, cfg, o.data(), B, y);
    };
    block_forward<Acc>(pool, cfg, A, M.plan.dspark[st].num_experts_per_tok, B, attn, nullptr, ids.data(), h, pi);
  }
  // Head on all rows, then the Markov bias and the draft chain, row by row.
  std::vector<int64_t> rows(B);
  for (int64_t i = 0; i < B; ++i) rows[i] = i;
  std::vector<Acc> logits;
  Vec xh;
  head_logits<Acc>(pool, cfg, floats(last.final_norm), M.weights.head, h.data(), pi, rows, logits, &xh);
  DraftResult out;
  out.logits.resize(B * V);
  const int64_t R = cfg.dspark_markov_rank;
  int32_t tok = next;
  std::vector<Acc> e(R), cat(D + R), bias(V), conf(1);
  Vec erow(R);
  for (int64_t i = 0; i < B; ++i) {
    floats_at(last.markov_embed, static_cast<int64_t>(tok) * R, R, erow.data());
    for (int64_t k = 0; k < R; ++k) e[k] = erow[k];
    f32_linear<Acc>(pool, e.data(), 1, last.markov_head, bias.data());
    Acc* li = &logits[i * V];
    int32_t best = 0;
    for (int64_t v = 0; v < V; ++v) {
      li[v] += bias[v];
      if (li[v] > li[best]) best = static_cast<int32_t>(v);
    }
    Acc z = 0;
    for (int64_t v = 0; v < V; ++v) z += std::exp(li[v] - li[best]);
    for (int64_t k = 0; k < D; ++k) cat[k] = xh[i * D + k];
    for (int64_t k = 0; k < R; ++k) cat[D + k] = e[k];
    f32_linear<Acc>(pool, cat.data(), 1, last.confidence_proj, conf.data());
    for (int64_t v = 0; v < V; ++v) out.logits[i * V + v] = static_cast<float>(li[v]);
    out.tokens.push_back(best);
    out.probs.push_back(static_cast<float>(static_cast<Acc>(1) / z));
    out.confidence.push_back(static_cast<float>(conf[0]));
    tok = best;
  }
  return out;
}

template void dspark_write_rings<float>(CallCtx&, const Vec&);
template void dspark_write_rings<double>(CallCtx&, const Vec&);
template DraftResult dspark_draft<float>(ThreadPool&, const family::Model&, const family::ModelPlan&, const StateGeometry&, const std::vector<float>&, const StreamState&, int32_t);
template DraftResult dspark_draft<double>(ThreadPool&, const family::Model&, const family::ModelPlan&, const StateGeometry&, const std::vector<float>&, const StreamState&, int32_t);

}  // namespace dsv4::cpu
