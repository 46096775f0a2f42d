// The KV-source compressor (model-spec.md §3.6): one latent per group of `ratio` tokens (ratio 2:
// fp32 gated pooling with partial groups carried across calls; ratio 1: bf16 linear), its index
// key (FP4 / UE8M0 per 32) and its compressed KV row (FP4 / E4M3 per 16, or FP8), appended to
// the stream's caches.
#pragma once

#include <cmath>

#include "backends/cpu/call_context.h"
#include "backends/cpu/kv_rows.h"
#include "backends/cpu/rmsnorm.h"
#include "backends/cpu/rope.h"

namespace dsv4::cpu {

// Index key and compressed row of group j from its normalised latent (bf16 [d]).
template <typename Acc>
void emit_compressed_row(CallCtx& c, int layer, StreamState& st, int64_t j, float* latent) {
  LayerCache& cache = st.layers[layer];
  st.last_index_publisher = layer;
  const ModelConfig& cfg = *c.cfg;
  const AttentionWeights& A = c.W->layers[layer].attn;
  const StateGeometry& geo = *c.geo;
  const int64_t d = cfg.head_dim, ihd = cfg.index_head_dim, rd = cfg.rope_dim;
  const int64_t pos = j * (*c.roles)[layer].ratio;
  // Index key from the un-rotated latent.
  Vec k(ihd), kn(ihd);
  bf16_linear<Acc>(*c.pool, latent, 1, A.idx_wk, k.data());
  rmsnorm_row<Acc>(k.data(), ihd, A.idx_k_norm.data(), cfg.norm_eps, kn.data());
  rope_apply<Acc>(&kn[ihd - rd], *c.freqs_yarn, pos, false);
  const size_t ik = cache.index_keys.size();
  cache.index_keys.resize(ik + geo.index_row);
  pack_row(RowFormat::fp4_ue8m0_32, kn.data(), ihd, &cache.index_keys[ik]);
  // Main compressed KV: RoPE at the group's first position, then QDQ into the row format.
  rope_apply<Acc>(&latent[d - rd], *c.freqs_yarn, pos, false);
  const size_t ck = cache.compressed.size();
  cache.compressed.resize(ck + geo.compressed_row);
  pack_row(cfg.compressed_format, latent, d, &cache.compressed[ck]);
}

// Runs the compressor of KV-source `layer` for every piece: rows of groups completed by this
// call are appended (row j = start/ratio ...), before any row of the layer reads them.
template <typename Acc>
void compress_layer(CallCtx& c, int layer, const float* x) {
  const ModelConfig& cfg = *c.cfg;
  const int ratio = (*c.roles)[layer].ratio;
  const AttentionWeights& A = c.W->layers[layer].attn;
  const StateGeometry& geo = *c.geo;
  const int64_t D = cfg.dim, d = cfg.head_dim, rows = c.rows, cap = geo.ring_capacity;
  Vec latent(d), normed(d);
  if (ratio == 1) {
    Vec lat(rows * d);
    bf16_linear<Acc>(*c.pool, x, rows, A.comp_wkv, lat.data());
    for (const PieceCtx& pc : c.pieces)
      for (int64_t i = 0; i < pc.T; ++i) {
        rmsnorm_row<Acc>(&lat[(pc.row0 + i) * d], d, A.comp_norm.data(), cfg.norm_eps, normed.data());
        emit_compressed_row<Acc>(c, layer, *pc.state, pc.start + i, normed.data());
      }
    return;
  }
  // ratio >= 2: fp32 projections of every row (weights widened from bf16), pooled per group.
  std::vector<Acc> xa(rows * D), kp(rows * d), gp(rows * d);
  for (int64_t i = 0; i < rows * D; ++i) xa[i] = x[i];
  f32_linear<Acc>(*c.pool, xa.data(), rows, A.comp_wkv, kp.data());
  f32_linear<Acc>(*c.pool, xa.data(), rows, A.comp_wgate, gp.data());
  for (const PieceCtx& pc : c.pieces) {
    LayerCache& cache = pc.state->layers[layer];
    auto kv_at = [&](int64_t q, bool gate) -> Acc* {
      static thread_local std::vector<Acc> tmp;
      if (q >= pc.start) return &(gate ? gp : kp)[(pc.row0 + q - pc.start) * d];
      const std::vector<double>& ring = gate ? cache.comp_gate : cache.comp_kv;
      tmp.resize(d);
      for (int64_t i = 0; i < d; ++i) tmp[i] = static_cast<Acc>(ring[(q % cap) * d + i]);
      return tmp.data();
    };
    for (int64_t i = 0; i < pc.T; ++i) {
      const int64_t p = pc.start + i;
      if ((p + 1) % ratio != 0) continue;
      const int64_t j = p / ratio;
      std::vector<Acc> ks(ratio * d), gs(ratio * d);
      for (int t = 0; t < ratio; ++t) {
        const int64_t qpos = j * ratio + t;
        const Acc* kr = kv_at(qpos, false);
        std::copy(kr, kr + d, &ks[t * d]);
        const Acc* gr = kv_at(qpos, true);
        std::copy(gr, gr + d, &gs[t * d]);
      }
      for (int64_t ch = 0; ch < d; ++ch) {
        Acc mx = gs[ch];
        for (int t = 1; t < ratio; ++t) mx = std::max(mx, gs[t * d + ch]);
        Acc e[8], sum = 0;
        for (int t = 0; t < ratio; ++t) { e[t] = std::exp(gs[t * d + ch] - mx); sum += e[t]; }
        Acc v = 0;
        for (int t = 0; t < ratio; ++t) v += ks[t * d + ch] * (e[t] / sum);
        latent[ch] = round_bf16(v);
      }
      rmsnorm_row<Acc>(latent.data(), d, A.comp_norm.data(), cfg.norm_eps, normed.data());
      emit_compressed_row<Acc>(c, layer, *pc.state, j, normed.data());
    }
    // Carry this piece's projections for groups completed by later calls (and for rollback).
    const int64_t keep = std::min<int64_t>(pc.T, cap);
    for (int64_t i = pc.T - keep; i < pc.T; ++i) {
      const int64_t slot = (pc.start + i) % cap;
      for (int64_t ch = 0; ch < d; ++ch) {
        cache.comp_kv[slot * d + ch] = static_cast<double>(kp[(pc.row0 + i) * d + ch]);
        cache.comp_gate[slot * d + ch] = static_cast<double>(gp[(pc.row0 + i) * d + ch]);
      }
    }
  }
}

}  // namespace dsv4::cpu
