// CSA2 attention layer on the device: per-call tables and the layer's launch sequence, in the order
// of model-spec.md §3.12 and cpu::attention_layer (see attention.h).
#include "backends/cuda/forward/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cuda/runtime/arena.h"
#include "backends/cuda/kernels/attention/attention_kernels.cuh"
#include "backends/cuda/kernels/block/block_ops.cuh"
#include "backends/cuda/forward/attention_state.h"
#include "backends/cuda/forward/attention_tables.h"
#include "backends/cuda/model/attention_weights.h"
#include "backends/cuda/runtime/call_meta.h"
#include "backends/cuda/runtime/check.h"
#include "backends/cuda/exl3/exl3_view.h"
#include "backends/cuda/forward/forward_v4.h"
#include "backends/cuda/kernels/linear/linear.cuh"
#include "backends/cuda/tp/tp_forward.h"
#include "backends/cuda/model/upload.h"

namespace dsv4::cuda {

namespace {

template <typename T>
StatusOr<T*> take(Arena& a, int64_t n, std::string_view what) {
  DSV4_ASSIGN_OR_RETURN(void* p, arena_alloc(a, static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(T), what));
  return static_cast<T*>(p);
}

int64_t align256(int64_t n) { return (n + 255) / 256 * 256; }

}  // namespace

Status begin_attention_call(CallCtx& c) {
  if (!c.cfg || !c.roles || !c.attn || !c.scratch)
    return error(StatusCode::invalid_argument, "attention call: config, roles, weights and scratch must be set");
  const family::ModelPlan& cfg = *c.cfg;
  auto t = std::make_shared<AttentionCallTables>();
  t->n_pieces = static_cast<int64_t>(c.pieces.size());
  std::vector<int32_t> row_piece(c.rows);
  std::vector<int64_t> pos(c.rows);
  int64_t next_row = 0;
  for (size_t i = 0; i < c.pieces.size(); ++i) {
    const DevicePiece& pc = c.pieces[i];
    if (!pc.caches) return error(StatusCode::invalid_argument, "attention call: piece {} has no caches", i);
    if (pc.row0 != next_row || pc.T <= 0)
      return error(StatusCode::invalid_argument, "attention call: piece {} rows [{}, +{}) out of order", i, pc.row0, pc.T);
    if (pc.start != pc.caches->length())
      return error(StatusCode::invalid_argument, "attention call: piece {} starts at {} but its stream holds {}", i,
                   pc.start, pc.caches->length());
    if (pc.start + pc.T > pc.caches->geometry().max_context)
      return error(StatusCode::out_of_range, "attention call: piece {} reaches {} past the max context {}", i,
                   pc.start + pc.T, pc.caches->geometry().max_context);
    if (!(pc.caches->geometry() == c.pieces[0].caches->geometry()))
      return error(StatusCode::invalid_argument, "attention call: piece {} has another cache geometry", i);
    for (size_t k = 0; k < i; ++k)
      if (c.pieces[k].caches == pc.caches)
        return error(StatusCode::invalid_argument, "attention call: a stream appears twice (pieces {} and {})", k, i);
    for (int64_t r = 0; r < pc.T; ++r) {
      row_piece[pc.row0 + r] = static_cast<int32_t>(i);
      pos[pc.row0 + r] = pc.start + r;
    }
    next_row += pc.T;
  }
  if (next_row != c.rows) return error(StatusCode::invalid_argument, "attention call: pieces cover {} of {} rows", next_row, c.rows);
  t->cap = c.pieces.empty() ? cfg.window : c.pieces[0].caches->geometry().ring_capacity;
  std::vector<EmitDev> emit[3];
  for (int ratio = 1; ratio <= 2; ++ratio) {
    if (c.pos_bound > 0) t->max_lc[ratio] = c.pos_bound / ratio;
    for (int64_t r = 0; r < c.rows; ++r) {
      t->max_lc[ratio] = std::max(t->max_lc[ratio], (pos[r] + 1) / ratio);
      if ((pos[r] + 1) % ratio == 0) emit[ratio].push_back({static_cast<int32_t>(r), row_piece[r], pos[r] / ratio});
    }
  }
  if (c.pos_bound > 0 && c.pos_bound < t->max_lc[1])
    return error(StatusCode::invalid_argument, "attention call: position bound {} below position {}", c.pos_bound,
                 t->max_lc[1] - 1);
  if (cfg.window_format == KvRowFormat::model1) DSV4_RETURN_IF_ERROR(begin_attention_call_v4(c));  // first: its metadata offsets then depend on the key only
  // Host image: pieces [L, P], row_piece, emit lists; each part 256-aligned.
  const int L = cfg.n_layers;
  const int64_t P = t->n_pieces, S = c.fixed_layout ? c.rows : P;  // S: entries per layer
  t->stride = S;
  if (c.fixed_layout)  // graph calls: every list `rows` long, the padding skipped by the kernels
    for (int ratio = 1; ratio <= 2; ++ratio) emit[ratio].resize(c.rows, EmitDev{-1, 0, 0});
  std::vector<PieceDev>& pd = t->host_pieces;
  pd.assign(L * S, PieceDev{});
  for (int l = 0; l < L; ++l) {
    const family::LayerPlan& role = (*c.roles)[l];
    for (int64_t i = 0; i < P; ++i) {
      const DevicePiece& pc = c.pieces[i];
      const LayerCachesDev& own = pc.caches->layer(l);
      PieceDev& d = pd[l * S + i];
      d.start = pc.start;
      d.T = pc.T;
      d.row0 = pc.row0;
      d.window = own.window;
      d.comp_kv = own.comp_kv;
      d.comp_gate = own.comp_gate;
      if (role.kv_from >= 0) {
        d.comp = pc.caches->layer(role.kv_from).compressed;
        d.ikeys = pc.caches->layer(role.kv_from).index_keys;
      }
    }
  }
  const int64_t off_rows = align256(sizeof(PieceDev) * L * S);
  const int64_t off_emit1 = off_rows + align256(sizeof(int32_t) * c.rows);
  const int64_t off_emit2 = off_emit1 + align256(sizeof(EmitDev) * emit[1].size());
  const int64_t total = off_emit2 + align256(sizeof(EmitDev) * emit[2].size());
  t->staging.assign(total, 0);
  std::memcpy(t->staging.data(), pd.data(), sizeof(PieceDev) * pd.size());
  std::memcpy(t->staging.data() + off_rows, row_piece.data(), sizeof(int32_t) * c.rows);
  std::memcpy(t->staging.data() + off_emit1, emit[1].data(), sizeof(EmitDev) * emit[1].size());
  std::memcpy(t->staging.data() + off_emit2, emit[2].data(), sizeof(EmitDev) * emit[2].size());
  DSV4_ASSIGN_OR_RETURN(uint8_t* dev, put_call_tables(c.meta, *c.scratch, c.stream, t->staging, "attention call tables"));
  t->pieces = reinterpret_cast<PieceDev*>(dev);
  t->row_piece = reinterpret_cast<int32_t*>(dev + off_rows);
  t->emit[1] = reinterpret_cast<EmitDev*>(dev + off_emit1);
  t->emit[2] = reinterpret_cast<EmitDev*>(dev + off_emit2);
  t->n_emit[1] = static_cast<int64_t>(emit[1].size());
  t->n_emit[2] = static_cast<int64_t>(emit[2].size());
  // Published slots.
  DSV4_ASSIGN_OR_RETURN(c.topk, take<int32_t>(*c.scratch, c.rows * cfg.index_topk, "published top-k"));
  c.cand_stride = std::max<int64_t>(1, std::max(t->max_lc[1], t->max_lc[2]));
  DSV4_ASSIGN_OR_RETURN(c.cand, take<uint8_t>(*c.scratch, c.rows * c.cand_stride, "published candidates"));
  c.tables = std::move(t);
  return ok_status();
}

int64_t attention_scratch_bytes(const family::ModelPlan& cfg, int64_t rows, int64_t max_pos) {
  const int64_t H = cfg.n_heads, d = cfg.head_dim, Q = cfg.q_lora, GO = int64_t{cfg.o_groups} * cfg.o_lora;
  const int64_t ihd = cfg.index_head_dim, IH = cfg.index_heads, lc = max_pos + 1;
  auto f = [](int64_t n) { return align256(n * 4); };
  int64_t call = align256(int64_t{sizeof(PieceDev)} * cfg.n_layers * rows) + 3 * align256(16 * rows) +
                 f(rows * cfg.index_topk) + align256(rows * lc);
  int64_t layer = 2 * f(rows * Q) + 2 * f(rows * H * d) + 2 * f(rows * d) + align256(rows * (d + d / 32)) +
                  2 * f(rows * GO) + 2 * f(rows * d) + f(rows * d) + f(rows * ihd) + f(rows * IH * ihd) +
                  f(rows * IH) + f(rows * lc) + f(sparse_attention_work_floats(rows, H, cfg.window, cfg.index_topk)) +
                  f(topk_work_ints(rows, lc, cfg.index_topk)) + f(candidate_work_elems(rows, lc, cfg.candidate_block_size)) +
                  f(rows * cfg.dim) + f(rows * cfg.index_topk) + 20 * 256;  // with bounded replay: kept rows' x, top-k
  return call + layer + (cfg.window_format == KvRowFormat::model1 ? attention_v4_extra_scratch_bytes(cfg, rows, max_pos) : 0);
}

Status attention_layer(CallCtx& c, int layer, const float* x, float* y) {
  if (!c.tables) return error(StatusCode::invalid_argument, "attention layer {}: begin_attention_call first", layer);
  const family::ModelPlan& cfg = *c.cfg;
  if (cfg.window_format == KvRowFormat::model1) {  // MODEL1 rows: attention_v4.cc (every row of the call)
    if (!c.layer_rows.empty())
      return error(StatusCode::unimplemented, "attention layer {}: bounded replay of V4 attention", layer);
    return attention_layer_v4(c, layer, x, y);
  }
  const family::LayerPlan& role = (*c.roles)[layer];
  if (layer < 0 || layer >= cfg.n_layers)
    return error(StatusCode::invalid_argument, "attention layer {} out of range", layer);
  const AttentionDevice& A = c.attn[layer];
  const AttentionCallTables& t = *c.tables;
  Arena& ar = *c.scratch;
  const size_t mark = ar.mark();
  const cudaStream_t s = c.stream;
  // The layer's rows: input rows (window keys, compressor) and output rows (queries and after); every row of
  // the call for both unless bounded replay staged them (LayerRowsDev).
  LayerRowsDev lr{RowsDev{c.rows, c.pos, t.row_piece}, RowsDev{c.rows, c.pos, t.row_piece},
                  t.pieces + layer * t.stride};
  if (!c.layer_rows.empty()) lr = c.layer_rows[layer];
  if (role.kv_source && lr.in.rows != c.rows)  // the groups' emit lists name call rows
    return error(StatusCode::internal, "attention layer {}: a KV source runs on every row of the call", layer);
  const int64_t R = lr.out.rows, RK = lr.in.rows, H = cfg.n_heads, d = cfg.head_dim, Q = cfg.q_lora, ab = cfg.act_block;
  const int nf = cfg.rope_dim / 2;
  const float eps = cfg.norm_eps;
  const PieceDev* pieces = lr.pieces;
  const int64_t wrow = d + d / 32;
  const CompFormat fmt = cfg.compressed_format == KvRowFormat::fp8_ue8m0_32 ? CompFormat::fp8_ue8m0_32
                                                                                : CompFormat::fp4_e4m3_16;
  auto shape = [&](int64_t out, int64_t in) { return shape_text({{"layer", layer}, {"rows", R}, {"out", out}, {"in", in}}); };
  auto kshape = [&](int64_t out, int64_t in) { return shape_text({{"layer", layer}, {"rows", RK}, {"out", out}, {"in", in}}); };

  // The window key (b) and the compressor (c) read only x and write nothing the query path reads: with
  // a side stream they run there beside the query (a) and the indexer's query projections, and the
  // index scores (or, without an indexer, the sparse attention) wait for them. The same launches run
  // either way.
  const cudaStream_t ks = c.side ? c.side.stream : s;
  bool joined = !c.side;
  auto join = [&]() -> Status {
    if (joined) return ok_status();
    joined = true;
    return join_side(c.side, s, "attention: joining the key path");
  };
  if (c.side) DSV4_RETURN_IF_ERROR(fork_side(c.side, s, "attention: forking the key path"));

  // The output rows' inputs: x itself, or its rows lr.keep (bounded replay).
  const float* xq = x;
  if (lr.keep && R > 0) {
    DSV4_ASSIGN_OR_RETURN(float* xk, take<float>(ar, R * cfg.dim, "attention output rows' x"));
    DSV4_CUDA_LAUNCH(gather_rows(x, lr.keep, R, cfg.dim, xk, s), "gather_rows(x)", shape(cfg.dim, cfg.dim));
    xq = xk;
  }

  // a. query of the output rows: qr = q_norm(wq_a x); q = wq_b qr with RoPE on each head's tail.
  DSV4_ASSIGN_OR_RETURN(float* qa, take<float>(ar, R * Q, "attention qa"));
  DSV4_ASSIGN_OR_RETURN(float* qr, take<float>(ar, R * Q, "attention qr"));
  DSV4_ASSIGN_OR_RETURN(float* q, take<float>(ar, R * H * d, "attention q"));
  if (R > 0) {
    DSV4_CUDA_LAUNCH(fp8_linear(xq, R, A.wq_a, ab, qa, s), "wq_a", shape(Q, cfg.dim));
    DSV4_CUDA_LAUNCH(norm_rope_rows(qa, R, Q, A.q_norm, eps, nullptr, 0, lr.out.pos, qr, nullptr, s), "q_norm", shape(Q, Q));
    DSV4_CUDA_LAUNCH(fp8_linear(qr, R, A.wq_b, ab, q, s), "wq_b", shape(H * d, Q));
    DSV4_CUDA_LAUNCH(rope_heads(q, R, H, d, A.freqs, nf, lr.out.pos, false, false, s), "q rope", shape(H * d, d));
  }

  // b. window key of the input rows: kv_norm(wkv x), RoPE, FP8 QDQ (packed rows for the ring, values for
  // this call).
  DSV4_ASSIGN_OR_RETURN(float* kv, take<float>(ar, RK * d, "attention kv"));
  DSV4_ASSIGN_OR_RETURN(float* kvn, take<float>(ar, RK * d, "attention kvn"));
  DSV4_ASSIGN_OR_RETURN(uint8_t* kvp, take<uint8_t>(ar, RK * wrow, "attention packed kv"));
  DSV4_CUDA_LAUNCH(fp8_linear(x, RK, A.wkv, ab, kv, ks), "wkv", kshape(d, cfg.dim));
  DSV4_CUDA_LAUNCH(norm_rope_rows(kv, RK, d, A.kv_norm, eps, A.freqs, nf, lr.in.pos, kvn, kvp, ks), "kv norm/rope/pack",
                   kshape(d, d));

  // c. compressor (KV source, every row of the call): rows of groups completed by this call, before anything
  // reads them.
  float* kp = nullptr;
  float* gp = nullptr;
  if (role.kv_source) {
    const int ratio = role.compress_ratio;
    const int64_t ne = t.n_emit[ratio], ihd = cfg.index_head_dim;
    DSV4_ASSIGN_OR_RETURN(float* lat, take<float>(ar, ne * d, "compressor latents"));
    if (ratio == 2) {
      DSV4_ASSIGN_OR_RETURN(kp, take<float>(ar, RK * d, "compressor kv projection"));
      DSV4_ASSIGN_OR_RETURN(gp, take<float>(ar, RK * d, "compressor gate projection"));
      if (A.comp_wkv.w && A.comp_wgate.w) {
        DSV4_CUDA_LAUNCH(f32_linear(x, RK, A.comp_wkv, kp, ks), "compressor wkv", kshape(d, cfg.dim));
        DSV4_CUDA_LAUNCH(f32_linear(x, RK, A.comp_wgate, gp, ks), "compressor wgate", kshape(d, cfg.dim));
      } else {
        DSV4_CUDA_LAUNCH(f32_linear(x, RK, A.comp_wkv32, kp, ks), "compressor wkv", kshape(d, cfg.dim));
        DSV4_CUDA_LAUNCH(f32_linear(x, RK, A.comp_wgate32, gp, ks), "compressor wgate", kshape(d, cfg.dim));
      }
      DSV4_CUDA_LAUNCH(compress_pool2(t.emit[2], ne, pieces, kp, gp, t.cap, d, A.comp_norm, eps, lat, ks),
                       "compressor pool", kshape(d, ne));
    } else {
      DSV4_ASSIGN_OR_RETURN(float* l1, take<float>(ar, RK * d, "compressor projection"));
      DSV4_CUDA_LAUNCH(bf16_linear(x, RK, A.comp_wkv, l1, ks), "compressor wkv", kshape(d, cfg.dim));
      DSV4_CUDA_LAUNCH(compress_norm1(t.emit[1], ne, l1, d, A.comp_norm, eps, lat, ks), "compressor norm", kshape(d, ne));
    }
    DSV4_ASSIGN_OR_RETURN(float* ik, take<float>(ar, ne * ihd, "index key projection"));
    DSV4_CUDA_LAUNCH(bf16_linear(lat, ne, A.idx_wk, ik, ks), "indexer wk", kshape(ihd, d));
    DSV4_CUDA_LAUNCH(emit_rows(t.emit[ratio], ne, pieces, lat, d, ik, ihd, A.idx_k_norm, eps, A.freqs, nf, ratio, fmt, ks),
                     "compressed/index rows", kshape(d, ne));
  }
  if (c.side) DSV4_RETURN_IF_ERROR(end_side(c.side, "attention: key path done"));

  // Indexer (index source): scores of the output rows against the published index keys, candidates, top-k
  // (published at the output rows).
  if (role.index_source && R > 0) {
    const int ratio = role.compress_ratio;
    const int64_t IH = cfg.index_heads, ihd = cfg.index_head_dim, lc = t.max_lc[ratio];
    DSV4_ASSIGN_OR_RETURN(float* qi, take<float>(ar, R * IH * ihd, "indexer queries"));
    DSV4_ASSIGN_OR_RETURN(float* wt, take<float>(ar, R * IH, "indexer weights"));
    DSV4_ASSIGN_OR_RETURN(float* sc, take<float>(ar, R * std::max<int64_t>(lc, 1), "indexer scores"));
    DSV4_CUDA_LAUNCH(fp8_linear(qr, R, A.idx_wq_b, ab, qi, s), "indexer wq_b", shape(IH * ihd, Q));
    DSV4_CUDA_LAUNCH(rope_heads(qi, R, IH, ihd, A.freqs, nf, lr.out.pos, false, true, s), "indexer q rope/qdq",
                     shape(IH * ihd, ihd));
    DSV4_CUDA_LAUNCH(bf16_linear(xq, R, A.idx_weights_proj, wt, s), "indexer weights_proj", shape(IH, cfg.dim));
    const float wscale = static_cast<float>(std::pow(static_cast<double>(ihd), -0.5) * std::pow(static_cast<double>(IH), -0.5));
    DSV4_RETURN_IF_ERROR(join());
    DSV4_CUDA_LAUNCH(index_scores(qi, wt, wscale, pieces, lr.out.row_piece, lr.out.pos, R, IH, ihd, ratio, sc, lc, lc, s),
                     "index scores", shape(lc, IH * ihd));
    if (role.candidate_source) {
      DSV4_ASSIGN_OR_RETURN(uint16_t* cw, take<uint16_t>(ar, candidate_work_elems(R, lc, cfg.candidate_block_size),
                                                         "candidate block keys"));
      DSV4_CUDA_LAUNCH(candidate_rows(sc, lc, lr.out.pos, R, ratio, cfg.candidate_topk_blocks, cfg.candidate_block_size,
                                      c.cand, c.cand_stride, cw, s), "candidate blocks", shape(lc, cfg.candidate_block_size));
    }
    // Candidate users: the published mask applies inside the top-k (rows outside it count as -inf).
    DSV4_ASSIGN_OR_RETURN(int32_t* tw, take<int32_t>(ar, topk_work_ints(R, lc, cfg.index_topk), "top-k chunks"));
    DSV4_CUDA_LAUNCH(topk_rows(sc, lc, lr.out.pos, R, ratio, role.uses_candidates ? c.cand : nullptr, c.cand_stride,
                               cfg.index_topk, c.topk, tw, s, role.uses_candidates ? lr.cand_at : nullptr),
                     "top-k", shape(cfg.index_topk, lc));
  }

  // d. sparse attention of the output rows over [window ; selected compressed rows], inverse RoPE; grouped o.
  const int64_t G = cfg.o_groups, O = cfg.o_lora, gin = H * d / G;
  const int64_t cap = t.cap;
  const int64_t n_sel = role.compress_ratio > 0 ? cfg.index_topk : 0;
  DSV4_ASSIGN_OR_RETURN(float* o, take<float>(ar, R * H * d, "attention o"));
  DSV4_ASSIGN_OR_RETURN(float* aw, take<float>(ar, sparse_attention_work_floats(R, H, cfg.window, n_sel), "attention scores"));
  // The selected rows this layer reads: the published list, or (bounded replay) its rows at lr.topk_at.
  const int32_t* sel = c.topk;
  if (lr.topk_at && n_sel > 0 && R > 0) {
    DSV4_ASSIGN_OR_RETURN(int32_t* st, take<int32_t>(ar, R * n_sel, "attention selected rows"));
    // Bit copies of int32 rows (gather_rows moves 32-bit words unchanged).
    DSV4_CUDA_LAUNCH(gather_rows(reinterpret_cast<const float*>(c.topk), lr.topk_at, R, n_sel, reinterpret_cast<float*>(st),
                                 s), "gather_rows(top-k)", shape(n_sel, n_sel));
    sel = st;
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  DSV4_RETURN_IF_ERROR(join());
  DSV4_CUDA_LAUNCH(sparse_attention(q, kvn, pieces, lr.out.row_piece, lr.out.pos, R, H, d, cfg.window, cap, sel,
                                    n_sel, fmt, A.sink, scale, A.freqs, nf, G, o, aw, s),
                   "sparse attention", shape(H * d, cfg.window + (role.compress_ratio > 0 ? cfg.index_topk : 0)));
  // The rings receive this call's rows after every row has read them (the input rows hold each piece's last
  // ring rows).
  DSV4_CUDA_LAUNCH(ring_write(pieces, lr.in.row_piece, RK, cap, kvp, wrow, kp, gp, d, s), "ring write", kshape(wrow, d));

  // Output: grouped wo_a (bf16, block-diagonal) then FP8 wo_b.
  if (R > 0) {
    DSV4_ASSIGN_OR_RETURN(float* zt, take<float>(ar, R * G * O, "attention wo_a out"));
    DSV4_ASSIGN_OR_RETURN(float* z, take<float>(ar, R * G * O, "attention z"));
    if (A.wo_a.exl3) {  // a pack's groups: one linear each, then [G, R, O] -> [R, G, O]
      for (int64_t g = 0; g < G; ++g) {
        Bf16View wg{A.wo_a.w + g * O * gin, O, gin, A.wo_a.exl3->group(g)};
        DSV4_CUDA_LAUNCH(bf16_linear(o + g * R * gin, R, wg, zt + g * R * O, s), "wo_a group", shape(O, gin));
      }
      DSV4_CUDA_LAUNCH(ungroup_rows(zt, R, G, O, z, s), "wo_a ungroup", shape(G * O, O));
    } else {  // every group in one launch, straight into [R, G, O]
      DSV4_CUDA_LAUNCH(bf16_grouped_linear(o, R, Bf16View{A.wo_a.w, G * O, gin}, G, z, s), "wo_a grouped", shape(G * O, gin));
    }
    if (c.collective) {  // tensor-parallel: every rank's groups side by side for the whole wo_b (tp_forward.h)
      DSV4_ASSIGN_OR_RETURN(z, tp_gather_groups(c, z, R, G * O));
    }
    DSV4_CUDA_LAUNCH(fp8_linear(z, R, A.wo_b, ab, y, s), "wo_b", shape(cfg.dim, A.wo_b.in));
  }
  ar.reset(mark);
  return ok_status();
}

}  // namespace dsv4::cuda
