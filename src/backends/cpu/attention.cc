// CSA2 attention of one backbone layer over every piece of a call (see attention.h).
#include "backends/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <tuple>
#include <vector>

#include "backends/cpu/compressor.h"
#include "backends/cpu/indexer.h"
#include "backends/cpu/kv_rows.h"
#include "backends/cpu/rmsnorm.h"
#include "backends/cpu/rope.h"

namespace dsv4::cpu {

template <typename Acc>
void sparse_attend_head(const float* q, const std::vector<const float*>& keys, int64_t d, Acc scale,
                        float sink, float* o, Acc* p_pre, Acc* o_pre) {
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  Acc m = static_cast<Acc>(-1e30), sum = 0;
  std::vector<Acc> acc(d, 0);
  const int64_t n = static_cast<int64_t>(keys.size());
  Acc s[64];
  for (int64_t b0 = 0; b0 < n; b0 += 64) {
    const int64_t len = std::min<int64_t>(64, n - b0);
    Acc mb = m;
    for (int64_t t = 0; t < len; ++t) {
      const float* k = keys[b0 + t];
      s[t] = k ? dot<Acc>(q, k, d) * scale : neg_inf;
      mb = std::max(mb, s[t]);
    }
    const Acc alpha = std::exp(m - mb);
    Acc psum = 0;
    for (int64_t i = 0; i < d; ++i) acc[i] *= alpha;
    for (int64_t t = 0; t < len; ++t) {
      const Acc p = std::exp(s[t] - mb);
      psum += p;
      if (p_pre) p_pre[b0 + t] = p;
      const float* k = keys[b0 + t];
      if (!k) continue;
      const Acc pb = round_bf16(p);
      for (int64_t i = 0; i < d; ++i) acc[i] += pb * static_cast<Acc>(k[i]);
    }
    sum = sum * alpha + psum;
    m = mb;
  }
  sum += std::exp(static_cast<Acc>(sink) - m);
  for (int64_t i = 0; i < d; ++i) {
    const Acc v = acc[i] / sum;
    if (o_pre) o_pre[i] = v;
    o[i] = round_bf16(v);
  }
}

std::vector<int32_t> select_topk_desc(const std::vector<float>& score, int64_t k) {
  std::vector<int32_t> idx(score.size());
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min<int64_t>(k, static_cast<int64_t>(idx.size()));
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
  idx.resize(k);
  return idx;
}

template <typename Acc>
void head_rms_bf16(float* q, int64_t n, float eps) {
  Acc s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<Acc>(round_bf16(static_cast<Acc>(q[i]) * static_cast<Acc>(q[i])));
  const Acc mean = round_bf16(s / static_cast<Acc>(n));
  const Acc v = round_bf16(mean + static_cast<Acc>(eps));
  const Acc r = round_bf16(static_cast<Acc>(1) / std::sqrt(v));
  for (int64_t i = 0; i < n; ++i) q[i] = round_bf16(static_cast<Acc>(q[i]) * r);
}

std::vector<int32_t> select_topk_rows(const std::vector<float>& score, int64_t k) {
  std::vector<int32_t> idx = select_topk_desc(score, k);
  std::sort(idx.begin(), idx.end());
  return idx;
}

std::vector<uint8_t> select_candidate_rows(const std::vector<float>& score, int64_t n,
                                           int64_t topk_blocks, int64_t block) {
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t nb = (n + block - 1) / block;
  std::vector<float> bs(nb, -inf);
  for (int64_t t = 0; t < n; ++t) bs[t / block] = std::max(bs[t / block], score[t]);
  if (n > 0) bs[(n - 1) / block] = inf;
  std::vector<int32_t> order(nb);
  std::iota(order.begin(), order.end(), 0);
  const int64_t k = std::min(topk_blocks, nb);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return bs[a] > bs[b] || (bs[a] == bs[b] && a < b);
  });
  std::vector<uint8_t> keep(n, 0);
  for (int64_t i = 0; i < k; ++i) {
    const int32_t b = order[i];
    if (!(bs[b] > -inf)) continue;
    for (int64_t t = b * block; t < std::min(n, (b + 1) * block); ++t) keep[t] = 1;
  }
  return keep;
}

template <typename Acc>
void attention_output(ThreadPool& pool, const family::LayerWeights& A, const family::ModelPlan& cfg,
                      const float* o, int64_t rows, float* y, Acc* z_pre, Acc* y_pre) {
  const int64_t G = cfg.o_groups, O = cfg.o_lora;
  const int64_t gin = static_cast<int64_t>(cfg.n_heads) * cfg.head_dim / G;
  Vec z(rows * G * O);
  if (A.wo_a.exl3) exl3_linear_bf16<Acc>(pool, o, rows, *A.wo_a.exl3, z.data());  // the pack's per-group slices
  else pool.parallel_for(G * O, [&](int64_t n0, int64_t n1) {
    Vec w(gin), ws((gin + A.wo_a.block - 1) / A.wo_a.block);
    for (int64_t n = n0; n < n1; ++n) {
      const int64_t g = n / O;
      fp8_weight_row(A.wo_a, n, w.data(), ws.data());  // e4m3 x 2^k is exact in bf16 (convert.py's wo_a)
      for (int64_t k = 0; k < gin; ++k) w[k] = round_bf16(w[k] * ws[k / A.wo_a.block]);
      for (int64_t r = 0; r < rows; ++r) {
        const Acc v = dot<Acc>(o + r * G * gin + g * gin, w.data(), gin);
        if (z_pre) z_pre[r * G * O + n] = v;
        z[r * G * O + n] = round_bf16(v);
      }
    }
  }, 4);
  fp8_linear<Acc>(pool, z.data(), rows, A.wo_b, y, cfg.act_block, y_pre);
}

namespace {

// Window keys of a piece: the rows computed in this call, else the stream's ring.
struct WindowSource {
  const PieceCtx* piece;
  const float* fresh;  // [T, d] QDQ'd keys of this call's rows
  const uint8_t* ring;
  int64_t cap, row_bytes, d;
  KvRowFormat format;
  int64_t rd;
  std::vector<std::vector<float>> decoded;  // ring rows decoded on demand, by slot
  const float* key(int64_t q) {
    if (q >= piece->start) return fresh + (q - piece->start) * d;
    const int64_t slot = q % cap;
    if (decoded[slot].empty()) {
      decoded[slot].resize(d);
      unpack_row(format, ring + slot * row_bytes, d, decoded[slot].data(), rd);
    }
    return decoded[slot].data();
  }
};

}  // namespace

template <typename Acc>
void attention_layer(CallCtx& in, CallCtx& out, int layer, const float* x_in, const float* x_out, float* y_out) {
  const family::ModelPlan& cfg = *in.cfg;
  const family::LayerPlan& role = (*in.roles)[layer];
  const family::LayerWeights& A = in.M->weights.layers[layer];
  const Vec sink = floats(A.attn_sink);
  ThreadPool& pool = *in.pool;
  const int64_t rows = out.rows, krows = in.rows, H = cfg.n_heads, d = cfg.head_dim, rd = cfg.rope_dim;
  const std::vector<float>& freqs = role.compress_ratio > 0 ? *in.freqs_yarn : *in.freqs_plain;
  const StateGeometry& geo = *in.geo;

  // Tests: the values before the bf16 roundings of this layer (pre_round.h), when it is tapped.
  const PreRoundSink* tap = out.pre_round;
  const int64_t kmax = cfg.window + cfg.index_topk;  // the probabilities' width: window part, then the picks
  auto slots = [&](int64_t n) { return pre_round_slots<Acc>(tap, n); };
  std::vector<Acc> t_wq_a = slots(rows * cfg.q_lora), t_q_norm = slots(rows * cfg.q_lora), t_wq_b = slots(rows * H * d),
                   t_q_rope = slots(rows * H * rd), t_wkv = slots(krows * d), t_kv_norm = slots(krows * d),
                   t_kv_rope = slots(krows * rd), t_probs = slots(rows * H * kmax), t_o = slots(rows * H * d),
                   t_o_rope = slots(rows * H * rd), t_wo_a = slots(rows * cfg.o_groups * cfg.o_lora),
                   t_wo_b = slots(rows * cfg.dim);
  if (tap) std::fill(t_probs.begin(), t_probs.end(), static_cast<Acc>(0));  // past a row's list: probability 0

  // a. query of the output rows: qr = q_norm(wq_a x); q = wq_b qr, RoPE on each head's tail.
  Vec qa(rows * cfg.q_lora), qr(rows * cfg.q_lora), q(rows * H * d);
  fp8_linear<Acc>(pool, x_out, rows, A.wq_a, qa.data(), cfg.act_block, slots_of(t_wq_a));
  rmsnorm_rows<Acc>(qa.data(), rows, cfg.q_lora, floats(A.q_norm).data(), cfg.norm_eps, qr.data(), slots_of(t_q_norm));
  fp8_linear<Acc>(pool, qr.data(), rows, A.wq_b, q.data(), cfg.act_block, slots_of(t_wq_b));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < H; ++h) {
      if (cfg.q_head_norm) head_rms_bf16<Acc>(&q[(r * H + h) * d], d, cfg.norm_eps);  // per-head q norm (V4)
      rope_apply<Acc>(&q[(r * H + h) * d + d - rd], freqs, out.pos[r], false,
                      tap ? &t_q_rope[(r * H + h) * rd] : nullptr);
    }

  // b. window key of the input rows: kv_norm(wkv x), RoPE, QDQ into the window row format (V4.1: FP8 over
  // all d dims per 32; V4: FP8 over the d - rd NoPE dims per 64, RoPE dims bf16); packed row kept.
  Vec kv(krows * d), kvn(krows * d);
  std::vector<uint8_t> kv_packed(krows * geo.window_row);
  fp8_linear<Acc>(pool, x_in, krows, A.wkv, kv.data(), cfg.act_block, slots_of(t_wkv));
  rmsnorm_rows<Acc>(kv.data(), krows, d, floats(A.kv_norm).data(), cfg.norm_eps, kvn.data(), slots_of(t_kv_norm));
  for (int64_t r = 0; r < krows; ++r) {
    rope_apply<Acc>(&kvn[r * d + d - rd], freqs, in.pos[r], false, tap ? &t_kv_rope[r * rd] : nullptr);
    pack_row(cfg.window_format, &kvn[r * d], d, &kv_packed[r * geo.window_row], rd);
    unpack_row(cfg.window_format, &kv_packed[r * geo.window_row], d, &kvn[r * d], rd);
  }

  // c. compressor (every input row), index keys, indexer and top-k (the output rows).
  if (role.kv_source) compress_layer<Acc>(in, layer, x_in);
  if (role.index_source) index_layer<Acc>(out, layer, x_out, qr.data());

  // d. sparse attention per output row: [window part (width W) ; selected compressed rows].
  Vec o(rows * H * d);
  const Acc scale = static_cast<Acc>(1.0 / std::sqrt(static_cast<double>(d)));
  for (size_t ip = 0; ip < in.pieces.size(); ++ip) {
    const PieceCtx& kp = in.pieces[ip];  // the piece's key rows
    const PieceCtx& pc = out.pieces[ip];  // its query rows: a suffix of kp's
    LayerCache& cache = kp.state->layers[layer];
    WindowSource ws{&kp, kvn.data() + kp.row0 * d, cache.window.data(), geo.ring_capacity, geo.window_row, d,
                    cfg.window_format, rd, std::vector<std::vector<float>>(geo.ring_capacity)};
    // Compressed rows of the KV source this layer reads, decoded once per piece.
    std::vector<float> comp;
    if (role.compress_ratio > 0 && pc.T > 0) {
      const LayerCache& src = kp.state->layers[role.kv_from];
      const int64_t n = static_cast<int64_t>(src.compressed.size()) / geo.compressed_row;
      comp.resize(n * d);
      for (int64_t j = 0; j < n; ++j)
        unpack_row(cfg.compressed_format, &src.compressed[j * geo.compressed_row], d, &comp[j * d], rd);
    }
    // Decode the ring rows this piece reads before the rows run in parallel (none below kp.start when the
    // key rows are a suffix of the call's piece: every window of a query row lies within them).
    for (int64_t qpos = std::max<int64_t>(0, pc.start - cfg.window + 1); qpos < kp.start; ++qpos) ws.key(qpos);
    pool.parallel_for(pc.T * H, [&](int64_t b, int64_t e) {
      std::vector<const float*> keys;
      for (int64_t ih = b; ih < e; ++ih) {
        const int64_t i = ih / H, h = ih % H, r = pc.row0 + i, p = pc.start + i;
        // Canonical window part: width W, positions max(0, p-W+1) .. p ascending from index 0,
        // then empty entries. With reference call shapes: a prefill (start 0) uses width
        // min(T, W); a one-token decode puts the empty ring slots first (positions end at W-1).
        int64_t width = cfg.window;
        bool empty_first = false;
        if (in.reference_shapes && pc.start == 0) width = std::min<int64_t>(pc.T, cfg.window);
        if (in.reference_shapes && pc.start > 0 && pc.T == 1 && cfg.reference_window_pads_first) empty_first = true;
        keys.assign(width, nullptr);
        const int64_t first = std::max<int64_t>(0, p - cfg.window + 1);
        const int64_t at = empty_first ? cfg.window - 1 - (p - first) : 0;
        for (int64_t qpos = first; qpos <= p; ++qpos) keys[at + qpos - first] = ws.key(qpos);
        if (role.attn == family::AttnKind::v4_hca) {
          // Every visible compressed row, ascending (model-spec.md §8).
          for (int64_t t = 0; t < (p + 1) / role.compress_ratio; ++t) keys.push_back(&comp[t * d]);
        } else if (role.compress_ratio > 0) {
          for (int32_t t : out.pub->topk[out.call_row[r]]) keys.push_back(&comp[static_cast<int64_t>(t) * d]);
        }
        std::vector<Acc> p_row;
        if (tap) p_row.assign(keys.size(), static_cast<Acc>(0));
        sparse_attend_head<Acc>(&q[(r * H + h) * d], keys, d, scale, sink[h], &o[(r * H + h) * d], slots_of(p_row),
                                tap ? &t_o[(r * H + h) * d] : nullptr);
        if (tap)
          std::copy(p_row.begin(), p_row.begin() + std::min<int64_t>(kmax, static_cast<int64_t>(p_row.size())),
                    &t_probs[(r * H + h) * kmax]);
        rope_apply<Acc>(&o[(r * H + h) * d + d - rd], freqs, p, true, tap ? &t_o_rope[(r * H + h) * rd] : nullptr);
      }
    }, 1);
    // The ring receives this piece's keys after every row has read it (its last ring rows are key rows).
    const int64_t keep = std::min<int64_t>(kp.T, geo.ring_capacity);
    for (int64_t i = kp.T - keep; i < kp.T; ++i) {
      const int64_t slot = (kp.start + i) % geo.ring_capacity;
      std::copy(&kv_packed[(kp.row0 + i) * geo.window_row], &kv_packed[(kp.row0 + i + 1) * geo.window_row],
                &cache.window[slot * geo.window_row]);
    }
  }
  attention_output<Acc>(pool, A, cfg, o.data(), rows, y_out, slots_of(t_wo_a), slots_of(t_wo_b));
  if (tap) {
    const std::tuple<const char*, int64_t, const std::vector<Acc>*> taps[] = {
        {"wq_a", rows, &t_wq_a},     {"q_norm", rows, &t_q_norm}, {"wq_b", rows, &t_wq_b},
        {"q_rope", rows, &t_q_rope}, {"wkv", krows, &t_wkv},      {"kv_norm", krows, &t_kv_norm},
        {"kv_rope", krows, &t_kv_rope}, {"probs", rows, &t_probs}, {"attn_o", rows, &t_o},
        {"o_rope", rows, &t_o_rope}, {"wo_a", rows, &t_wo_a},     {"wo_b", rows, &t_wo_b}};
    for (const auto& [name, n, v] : taps) give_pre_round(tap, name, n, *v);
  }
}

template void sparse_attend_head<float>(const float*, const std::vector<const float*>&, int64_t, float, float, float*,
                                        float*, float*);
template void sparse_attend_head<double>(const float*, const std::vector<const float*>&, int64_t, double, float, float*,
                                         double*, double*);
template void attention_layer<float>(CallCtx&, CallCtx&, int, const float*, const float*, float*);
template void attention_layer<double>(CallCtx&, CallCtx&, int, const float*, const float*, float*);
template void attention_output<float>(ThreadPool&, const family::LayerWeights&, const family::ModelPlan&, const float*, int64_t, float*,
                                      float*, float*);
template void attention_output<double>(ThreadPool&, const family::LayerWeights&, const family::ModelPlan&, const float*, int64_t, float*,
                                       double*, double*);
template void head_rms_bf16<float>(float*, int64_t, float);
template void head_rms_bf16<double>(float*, int64_t, float);

}  // namespace dsv4::cpu
