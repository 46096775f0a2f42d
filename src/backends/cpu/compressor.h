// The compressors (model-spec.md §3.6, §8): one latent per group of `ratio` tokens by fp32 gated
// pooling (V4.1 ratio 2; every V4 compressor, with the position bias `ape` and, at ratio 4, the
// overlapped 2x-wide projections pooling the previous group too) or a bf16 linear (V4.1 ratio 1);
// projections of partial groups carried across calls. The latent's index key and compressed row
// are appended to the stream's caches before any row of the layer reads them.
#pragma once

#include <cmath>
#include <functional>
#include <limits>

#include "backends/cpu/call_context.h"
#include "backends/cpu/hadamard.h"
#include "backends/cpu/kv_rows.h"
#include "backends/cpu/rmsnorm.h"
#include "backends/cpu/rope.h"

namespace dsv4::cpu {

// One gated-pooling compressor: weights [w, D] (w = 2n with overlap, else n), ape f32 [ratio, w]
// (empty: none), the stream ring members holding its projections.
struct PoolSpec {
  const Matrix* wkv = nullptr;
  const Matrix* wgate = nullptr;
  const TensorView* ape = nullptr;
  int ratio = 2;
  bool overlap = false;
  int64_t cap = 0;  // ring slots (position q in slot q % cap)
  std::vector<double> LayerCache::*ring_kv = nullptr;
  std::vector<double> LayerCache::*ring_gate = nullptr;
};

// Softmax-gated pooling of one channel over `n` slots (kv, score; score -inf = empty slot), in
// slot order: sum_s kv_s * (exp(score_s - max) / sum exp), as the reference's fp32 softmax.
template <typename Acc>
inline Acc pool_channel(const Acc* kv, const Acc* score, int n) {
  Acc mx = score[0];
  for (int s = 1; s < n; ++s) mx = std::max(mx, score[s]);
  Acc e[256], sum = 0;
  for (int s = 0; s < n; ++s) { e[s] = std::exp(score[s] - mx); sum += e[s]; }
  Acc v = 0;
  for (int s = 0; s < n; ++s) v += kv[s] * (e[s] / sum);
  return v;
}

// Runs the compressor `P` of `layer` on x bf16 [rows, D] for every piece; for each group j
// completed by this call, emit(stream, j, latent bf16 [n]) in position order.
template <typename Acc>
void pooled_groups(CallCtx& c, int layer, const PoolSpec& P, const float* x,
                   const std::function<void(StreamState&, int64_t, float*)>& emit) {
  const int64_t D = c.cfg->dim, rows = c.rows, w = P.wkv->out(), n = P.overlap ? w / 2 : w;
  const Vec ape = P.ape ? floats(*P.ape) : Vec();
  const int r = P.ratio;
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  // fp32 projections of every row (weights widened from bf16).
  std::vector<Acc> xa(rows * D), kp(rows * w), gp(rows * w);
  for (int64_t i = 0; i < rows * D; ++i) xa[i] = x[i];
  f32_linear<Acc>(*c.pool, xa.data(), rows, *P.wkv, kp.data());
  f32_linear<Acc>(*c.pool, xa.data(), rows, *P.wgate, gp.data());
  std::vector<Acc> kslot(2 * r), sslot(2 * r), tmp(w);
  std::vector<float> latent(n);
  for (const PieceCtx& pc : c.pieces) {
    LayerCache& cache = pc.state->layers[layer];
    std::vector<double>& ring_kv = cache.*P.ring_kv;
    std::vector<double>& ring_gate = cache.*P.ring_gate;
    // Projection row of position q: this call's rows, else the stream's ring.
    std::vector<Acc> kq(w), gq(w);
    auto fetch = [&](int64_t q, std::vector<Acc>& k, std::vector<Acc>& g) {
      if (q >= pc.start) {
        std::copy(&kp[(pc.row0 + q - pc.start) * w], &kp[(pc.row0 + q - pc.start + 1) * w], k.begin());
        std::copy(&gp[(pc.row0 + q - pc.start) * w], &gp[(pc.row0 + q - pc.start + 1) * w], g.begin());
      } else {
        for (int64_t i = 0; i < w; ++i) {
          k[i] = static_cast<Acc>(ring_kv[(q % P.cap) * w + i]);
          g[i] = static_cast<Acc>(ring_gate[(q % P.cap) * w + i]);
        }
      }
      if (!ape.empty())  // score + ape[q mod ratio], fp32 as the reference
        for (int64_t i = 0; i < w; ++i) g[i] = g[i] + static_cast<Acc>(ape[(q % r) * w + i]);
    };
    for (int64_t i = 0; i < pc.T; ++i) {
      const int64_t p = pc.start + i;
      if ((p + 1) % r != 0) continue;
      const int64_t j = p / r;
      // Slots: with overlap, [previous group through channels 0..n-1 ; this group through
      // channels n..2n-1] (first group: the previous half empty); else this group only.
      const int slots = P.overlap ? 2 * r : r;
      std::vector<std::vector<Acc>> K(slots, std::vector<Acc>(n)), S(slots, std::vector<Acc>(n));
      for (int t = 0; t < r; ++t) {
        fetch(j * r + t, kq, gq);
        const int s = P.overlap ? r + t : t;
        const int64_t off = P.overlap ? n : 0;
        for (int64_t ch = 0; ch < n; ++ch) { K[s][ch] = kq[off + ch]; S[s][ch] = gq[off + ch]; }
        if (P.overlap) {
          if (j > 0) {
            fetch((j - 1) * r + t, kq, gq);
            for (int64_t ch = 0; ch < n; ++ch) { K[t][ch] = kq[ch]; S[t][ch] = gq[ch]; }
          } else {
            for (int64_t ch = 0; ch < n; ++ch) { K[t][ch] = 0; S[t][ch] = neg_inf; }
          }
        }
      }
      for (int64_t ch = 0; ch < n; ++ch) {
        for (int s = 0; s < slots; ++s) { kslot[s] = K[s][ch]; sslot[s] = S[s][ch]; }
        latent[ch] = round_bf16(pool_channel<Acc>(kslot.data(), sslot.data(), slots));
      }
      emit(*pc.state, j, latent.data());
    }
    // Carry this piece's projections for groups completed by later calls (and for rollback).
    const int64_t keep = std::min<int64_t>(pc.T, P.cap);
    for (int64_t i = pc.T - keep; i < pc.T; ++i) {
      const int64_t slot = (pc.start + i) % P.cap;
      for (int64_t ch = 0; ch < w; ++ch) {
        ring_kv[slot * w + ch] = static_cast<double>(kp[(pc.row0 + i) * w + ch]);
        ring_gate[slot * w + ch] = static_cast<double>(gp[(pc.row0 + i) * w + ch]);
      }
    }
  }
}

// V4.1: index key and compressed row of group j from its normalised latent (bf16 [d]).
template <typename Acc>
void emit_compressed_row(CallCtx& c, int layer, StreamState& st, int64_t j, float* latent) {
  LayerCache& cache = st.layers[layer];
  st.last_index_publisher = layer;
  const family::ModelPlan& cfg = *c.cfg;
  const family::LayerWeights& A = c.M->weights.layers[layer];
  const StateGeometry& geo = *c.geo;
  const int64_t d = cfg.head_dim, ihd = cfg.index_head_dim, rd = cfg.rope_dim;
  const int64_t pos = j * (*c.roles)[layer].compress_ratio;
  // Index key from the un-rotated latent.
  Vec k(ihd), kn(ihd);
  bf16_linear<Acc>(*c.pool, latent, 1, A.indexer_wk, k.data());
  rmsnorm_row<Acc>(k.data(), ihd, floats(A.indexer_k_norm).data(), cfg.norm_eps, kn.data());
  rope_apply<Acc>(&kn[ihd - rd], *c.freqs_yarn, pos, false);
  const size_t ik = cache.index_keys.size();
  cache.index_keys.resize(ik + geo.index_row);
  pack_row(cfg.index_format, kn.data(), ihd, &cache.index_keys[ik], rd);
  // Main compressed KV: RoPE at the group's first position, then QDQ into the row format.
  rope_apply<Acc>(&latent[d - rd], *c.freqs_yarn, pos, false);
  const size_t ck = cache.compressed.size();
  cache.compressed.resize(ck + geo.compressed_row);
  pack_row(cfg.compressed_format, latent, d, &cache.compressed[ck], rd);
}

// Runs the compressor(s) of KV-source `layer` for every piece: rows of groups completed by this
// call are appended (row j = start/ratio ...). V4 ratio 4 also runs the indexer's compressor
// (index keys: norm, RoPE, Hadamard, FP4) before the main one, as the reference does.
template <typename Acc>
void compress_layer(CallCtx& c, int layer, const float* x) {
  const family::ModelPlan& cfg = *c.cfg;
  const family::LayerPlan& role = (*c.roles)[layer];
  const int ratio = role.compress_ratio;
  const family::LayerWeights& A = c.M->weights.layers[layer];
  const StateGeometry& geo = *c.geo;
  const int64_t d = cfg.head_dim, rd = cfg.rope_dim, ihd = cfg.index_head_dim, rows = c.rows;
  const Vec comp_norm = floats(A.compressor_norm), idx_comp_norm = floats(A.indexer_compressor_norm);
  Vec normed(std::max(d, ihd));
  if (ratio == 1) {  // V4.1 layer 20: bf16 linear, no pooling
    Vec lat(rows * d);
    bf16_linear<Acc>(*c.pool, x, rows, A.compressor_wkv, lat.data());
    for (const PieceCtx& pc : c.pieces)
      for (int64_t i = 0; i < pc.T; ++i) {
        rmsnorm_row<Acc>(&lat[(pc.row0 + i) * d], d, comp_norm.data(), cfg.norm_eps, normed.data());
        emit_compressed_row<Acc>(c, layer, *pc.state, pc.start + i, normed.data());
      }
    return;
  }
  if (!role.compressor_ape) {  // V4.1: plain pooled groups
    PoolSpec P{&A.compressor_wkv, &A.compressor_wgate, nullptr, ratio, false, geo.layers[layer].proj_kv.capacity, &LayerCache::comp_kv,
               &LayerCache::comp_gate};
    pooled_groups<Acc>(c, layer, P, x, [&](StreamState& st, int64_t j, float* lat) {
      rmsnorm_row<Acc>(lat, d, comp_norm.data(), cfg.norm_eps, normed.data());
      emit_compressed_row<Acc>(c, layer, st, j, normed.data());
    });
    return;
  }
  if (role.compressor_overlap) {  // the indexer's compressor: index keys
    PoolSpec P{&A.indexer_compressor_wkv, &A.indexer_compressor_wgate, &A.indexer_compressor_ape, ratio, true, geo.layers[layer].proj_kv.capacity,
               &LayerCache::idx_comp_kv, &LayerCache::idx_comp_gate};
    pooled_groups<Acc>(c, layer, P, x, [&](StreamState& st, int64_t j, float* lat) {
      rmsnorm_row<Acc>(lat, ihd, idx_comp_norm.data(), cfg.norm_eps, normed.data());
      rope_apply<Acc>(&normed[ihd - rd], *c.freqs_yarn, j * ratio, false);
      hadamard_row<Acc>(normed.data(), ihd);
      std::vector<uint8_t>& keys = st.layers[layer].index_keys;
      const size_t at = keys.size();
      keys.resize(at + geo.index_row);
      pack_row(cfg.index_format, normed.data(), ihd, &keys[at], rd);
    });
  }
  PoolSpec P{&A.compressor_wkv, &A.compressor_wgate, &A.compressor_ape, ratio, role.compressor_overlap, geo.layers[layer].proj_kv.capacity, &LayerCache::comp_kv,
             &LayerCache::comp_gate};
  pooled_groups<Acc>(c, layer, P, x, [&](StreamState& st, int64_t j, float* lat) {
    rmsnorm_row<Acc>(lat, d, comp_norm.data(), cfg.norm_eps, normed.data());
    rope_apply<Acc>(&normed[d - rd], *c.freqs_yarn, j * ratio, false);
    std::vector<uint8_t>& rows_out = st.layers[layer].compressed;
    const size_t at = rows_out.size();
    rows_out.resize(at + geo.compressed_row);
    pack_row(cfg.compressed_format, normed.data(), d, &rows_out[at], rd);
  });
}

}  // namespace dsv4::cpu
