// V4 / 0731 attention of one backbone layer on the device: the launch sequence of
// cpu::attention_layer with cfg.v4() (model-spec.md §8) — query with the per-head bf16 norm, V4
// window rows, every compressed layer's own gated compressor (ratio 4 overlapped with its
// Hadamard FP4 indexer and descending top-k, larger ratios attending every visible row), sparse
// attention over V4 rows, grouped output. Per-layer tables (pieces, row -> piece, the groups this
// call completes) are built here from the call's pieces.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cuda/arena.h"
#include "backends/cuda/attention_kernels.cuh"
#include "backends/cuda/attention_state.h"
#include "backends/cuda/attention_weights.h"
#include "backends/cuda/attn_v4.cuh"
#include "backends/cuda/check.h"
#include "backends/cuda/forward_v4.h"
#include "backends/cuda/linear.cuh"
#include "backends/cuda/upload.h"

namespace dsv4::cuda {

namespace {

template <typename T>
StatusOr<T*> take(Arena& a, int64_t n, std::string_view what) {
  DSV4_ASSIGN_OR_RETURN(void* p, arena_alloc(a, static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(T), what));
  return static_cast<T*>(p);
}

int64_t align256(int64_t n) { return (n + 255) / 256 * 256; }

// The layer's device tables: V4 pieces, the same pieces as PieceDev (index_scores reads .ikeys),
// row -> piece, and the groups completed by this call at the layer's ratio.
struct LayerTables {
  PieceV4* pv = nullptr;
  PieceDev* pd = nullptr;
  int32_t* row_piece = nullptr;
  EmitDev* emit = nullptr;
  int64_t n_emit = 0, max_lc = 0;
};

StatusOr<LayerTables> layer_tables(CallCtx& c, int layer, int ratio) {
  const int64_t P = static_cast<int64_t>(c.pieces.size()), R = c.rows;
  std::vector<PieceV4> pv(P);
  std::vector<PieceDev> pd(P);
  std::vector<int32_t> row_piece(R);
  std::vector<EmitDev> emit;
  LayerTables t;
  for (int64_t i = 0; i < P; ++i) {
    const DevicePiece& pc = c.pieces[i];
    const LayerCachesDev& L = pc.caches->layer(layer);
    pv[i] = PieceV4{pc.start, pc.T, pc.row0, L.window, L.compressed, L.index_keys,
                    L.comp_kv, L.comp_gate, L.idx_comp_kv, L.idx_comp_gate};
    PieceDev& d = pd[i];
    d.start = pc.start;
    d.T = pc.T;
    d.row0 = pc.row0;
    d.window = L.window;
    d.comp = L.compressed;
    d.ikeys = L.index_keys;
    for (int64_t r = 0; r < pc.T; ++r) {
      row_piece[pc.row0 + r] = static_cast<int32_t>(i);
      if (ratio > 0) {
        const int64_t p = pc.start + r;
        t.max_lc = std::max(t.max_lc, (p + 1) / ratio);
        if ((p + 1) % ratio == 0) emit.push_back({static_cast<int32_t>(pc.row0 + r), static_cast<int32_t>(i), p / ratio});
      }
    }
  }
  const int64_t o_pd = align256(sizeof(PieceV4) * P), o_rp = o_pd + align256(sizeof(PieceDev) * P);
  const int64_t o_em = o_rp + align256(4 * R), total = o_em + align256(sizeof(EmitDev) * emit.size());
  std::vector<uint8_t> host(total, 0);
  std::memcpy(host.data(), pv.data(), sizeof(PieceV4) * P);
  std::memcpy(host.data() + o_pd, pd.data(), sizeof(PieceDev) * P);
  std::memcpy(host.data() + o_rp, row_piece.data(), 4 * R);
  if (!emit.empty()) std::memcpy(host.data() + o_em, emit.data(), sizeof(EmitDev) * emit.size());
  DSV4_ASSIGN_OR_RETURN(uint8_t* dev, take<uint8_t>(*c.scratch, total, "V4 attention layer tables"));
  // Pageable source: the copy is staged before cudaMemcpyAsync returns, so `host` may go.
  DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(dev, host.data(), total, cudaMemcpyHostToDevice, c.stream),
                                   "V4 attention layer tables upload"));
  t.pv = reinterpret_cast<PieceV4*>(dev);
  t.pd = reinterpret_cast<PieceDev*>(dev + o_pd);
  t.row_piece = reinterpret_cast<int32_t*>(dev + o_rp);
  t.emit = reinterpret_cast<EmitDev*>(dev + o_em);
  t.n_emit = static_cast<int64_t>(emit.size());
  return t;
}

}  // namespace

int64_t attention_v4_extra_scratch_bytes(const cpu::ModelConfig& cfg, int64_t rows, int64_t max_pos) {
  const int64_t d = cfg.head_dim, ihd = cfg.index_head_dim;
  const int64_t tables = rows * static_cast<int64_t>(sizeof(PieceV4) + sizeof(PieceDev) + 4 + sizeof(EmitDev));
  int64_t visible = 0;  // widest "every visible row" list of the layers without an indexer
  for (const cpu::LayerRole& r : cpu::layer_roles(cfg))
    if (r.ratio > 0 && !r.index_source) visible = std::max(visible, (max_pos + 1) / r.ratio);
  return 4 * (4 * rows * d + 4 * rows * ihd + rows * visible) + rows * (2 * d + 64) + tables + 16 * 256;
}

Status attention_layer_v4(CallCtx& c, int layer, const float* x, float* y) {
  const cpu::ModelConfig& cfg = *c.cfg;
  if (layer < 0 || layer >= cfg.n_layers) return error(StatusCode::invalid_argument, "attention layer {} out of range", layer);
  if (c.pieces.empty() || c.rows == 0) return ok_status();
  const cpu::LayerRole& role = (*c.roles)[layer];
  const AttentionDevice& A = c.attn[layer];
  const AttnGeometry& geo = c.pieces[0].caches->geometry();
  Arena& ar = *c.scratch;
  const size_t mark = ar.mark();
  const cudaStream_t s = c.stream;
  const int64_t R = c.rows, H = cfg.n_heads, d = cfg.head_dim, Q = cfg.q_lora, rd = cfg.rope_dim;
  const int ab = cfg.act_block, nf = cfg.rope_dim / 2, ratio = role.ratio;
  const float eps = cfg.norm_eps;
  const int64_t cap = geo.ring_capacity, wrow = row_v4_bytes(d, rd);
  if (!geo.v4 || geo.window_row != wrow || (ratio > 0 && geo.compressed_row != wrow))
    return error(StatusCode::internal, "V4 attention layer {}: caches of another row format ({} B, expected {} B)", layer,
                 geo.window_row, wrow);
  auto shape = [&](int64_t out, int64_t in) { return shape_text({{"layer", layer}, {"rows", R}, {"out", out}, {"in", in}}); };
  DSV4_ASSIGN_OR_RETURN(LayerTables t, layer_tables(c, layer, ratio));

  // a. query: qr = q_norm(wq_a x); q = wq_b qr; per-head bf16 RMS norm, RoPE of each head's tail.
  DSV4_ASSIGN_OR_RETURN(float* qa, take<float>(ar, R * Q, "attention qa"));
  DSV4_ASSIGN_OR_RETURN(float* qr, take<float>(ar, R * Q, "attention qr"));
  DSV4_ASSIGN_OR_RETURN(float* q, take<float>(ar, R * H * d, "attention q"));
  DSV4_CUDA_LAUNCH(fp8_linear(x, R, A.wq_a, ab, qa, s), "wq_a", shape(Q, cfg.dim));
  DSV4_CUDA_LAUNCH(norm_rope_rows(qa, R, Q, A.q_norm, eps, nullptr, 0, c.pos, qr, nullptr, s), "q_norm", shape(Q, Q));
  DSV4_CUDA_LAUNCH(fp8_linear(qr, R, A.wq_b, ab, q, s), "wq_b", shape(H * d, Q));
  DSV4_CUDA_LAUNCH(v4_head_rms(q, R * H, d, eps, s), "q head norm", shape(H * d, d));
  DSV4_CUDA_LAUNCH(rope_heads(q, R, H, d, A.freqs, nf, c.pos, false, false, s), "q rope", shape(H * d, d));

  // b. window key: kv_norm(wkv x), RoPE, QDQ into the V4 row (packed rows for the ring).
  DSV4_ASSIGN_OR_RETURN(float* kv, take<float>(ar, R * d, "attention kv"));
  DSV4_ASSIGN_OR_RETURN(float* kvn, take<float>(ar, R * d, "attention kvn"));
  DSV4_ASSIGN_OR_RETURN(uint8_t* kvp, take<uint8_t>(ar, R * wrow, "attention packed kv"));
  DSV4_CUDA_LAUNCH(fp8_linear(x, R, A.wkv, ab, kv, s), "wkv", shape(d, cfg.dim));
  DSV4_CUDA_LAUNCH(norm_rope_rows(kv, R, d, A.kv_norm, eps, A.freqs, nf, c.pos, kvn, nullptr, s), "kv norm/rope", shape(d, d));
  DSV4_CUDA_LAUNCH(v4_pack_rows(kvn, R, d, rd, kvp, s), "kv V4 rows", shape(wrow, d));

  // c. compressors: the indexer's (ratio 4) then the main one, rows of the groups this call completes.
  const int64_t w = geo.proj_width[layer], pcap = geo.proj_cap[layer], iw = 2 * static_cast<int64_t>(cfg.index_head_dim);
  float *kp = nullptr, *gp = nullptr, *ikp = nullptr, *igp = nullptr;
  if (ratio > 0) {
    if (role.overlap) {
      DSV4_ASSIGN_OR_RETURN(ikp, take<float>(ar, R * iw, "indexer compressor kv projection"));
      DSV4_ASSIGN_OR_RETURN(igp, take<float>(ar, R * iw, "indexer compressor gate projection"));
      DSV4_CUDA_LAUNCH(f32_linear_either(x, R, A.idx_comp_wkv32, A.idx_comp_wkv, ikp, s), "indexer compressor wkv", shape(iw, cfg.dim));
      DSV4_CUDA_LAUNCH(f32_linear_either(x, R, A.idx_comp_wgate32, A.idx_comp_wgate, igp, s), "indexer compressor wgate",
                       shape(iw, cfg.dim));
      DSV4_CUDA_LAUNCH(v4_compress(t.emit, t.n_emit, t.pv, ikp, igp, iw, true, ratio, pcap, A.idx_comp_ape, A.idx_comp_norm,
                                   eps, A.freqs, nf, true, rd, s), "indexer compressor pool/keys", shape(iw, t.n_emit));
    }
    DSV4_ASSIGN_OR_RETURN(kp, take<float>(ar, R * w, "compressor kv projection"));
    DSV4_ASSIGN_OR_RETURN(gp, take<float>(ar, R * w, "compressor gate projection"));
    DSV4_CUDA_LAUNCH(f32_linear_either(x, R, A.comp_wkv32, A.comp_wkv, kp, s), "compressor wkv", shape(w, cfg.dim));
    DSV4_CUDA_LAUNCH(f32_linear_either(x, R, A.comp_wgate32, A.comp_wgate, gp, s), "compressor wgate", shape(w, cfg.dim));
    DSV4_CUDA_LAUNCH(v4_compress(t.emit, t.n_emit, t.pv, kp, gp, w, role.overlap, ratio, pcap, A.comp_ape, A.comp_norm, eps,
                                 A.freqs, nf, false, rd, s), "compressor pool/rows", shape(w, t.n_emit));
  }

  // d. the compressed rows each query attends: ratio 4 by the indexer (descending score order),
  // larger ratios every visible row ascending.
  int32_t* sel = nullptr;
  int64_t n_sel = 0;
  if (ratio > 0 && role.index_source) {
    const int64_t IH = cfg.index_heads, ihd = cfg.index_head_dim, lc = t.max_lc;
    n_sel = cfg.index_topk;
    sel = c.topk;  // published [rows, index_topk] (begin_attention_call), as V4.1 index sources do
    if (lc == 0) {
      DSV4_CUDA_LAUNCH(v4_all_rows(c.pos, R, ratio, n_sel, sel, s), "top-k (no rows yet)", shape(n_sel, 0));
    } else {
      DSV4_ASSIGN_OR_RETURN(float* qi, take<float>(ar, R * IH * ihd, "indexer queries"));
      DSV4_ASSIGN_OR_RETURN(float* wt, take<float>(ar, R * IH, "indexer weights"));
      DSV4_ASSIGN_OR_RETURN(float* sc, take<float>(ar, R * lc, "indexer scores"));
      DSV4_CUDA_LAUNCH(fp8_linear(qr, R, A.idx_wq_b, ab, qi, s), "indexer wq_b", shape(IH * ihd, Q));
      DSV4_CUDA_LAUNCH(rope_heads(qi, R, IH, ihd, A.freqs, nf, c.pos, false, false, s), "indexer q rope", shape(IH * ihd, ihd));
      DSV4_CUDA_LAUNCH(v4_hadamard_fp4(qi, R * IH, ihd, s), "indexer q hadamard/qdq", shape(IH * ihd, ihd));
      DSV4_CUDA_LAUNCH(bf16_linear(x, R, A.idx_weights_proj, wt, s), "indexer weights_proj", shape(IH, cfg.dim));
      const float wscale = static_cast<float>(std::pow(static_cast<double>(ihd), -0.5) * std::pow(static_cast<double>(IH), -0.5));
      DSV4_CUDA_LAUNCH(index_scores(qi, wt, wscale, t.pd, t.row_piece, c.pos, R, IH, ihd, ratio, sc, lc, lc, s),
                       "index scores", shape(lc, IH * ihd));
      DSV4_ASSIGN_OR_RETURN(int32_t* tw, take<int32_t>(ar, topk_work_ints(R, lc, n_sel), "top-k chunks"));
      DSV4_CUDA_LAUNCH(v4_topk_desc(sc, lc, c.pos, R, ratio, n_sel, sel, tw, s), "top-k", shape(n_sel, lc));
    }
  } else if (ratio > 0 && t.max_lc > 0) {
    n_sel = t.max_lc;
    DSV4_ASSIGN_OR_RETURN(sel, take<int32_t>(ar, R * n_sel, "visible compressed rows"));
    DSV4_CUDA_LAUNCH(v4_all_rows(c.pos, R, ratio, n_sel, sel, s), "visible compressed rows", shape(n_sel, 0));
  }

  // e. sparse attention over [window ; selected rows], inverse RoPE; then the ring writes.
  const int64_t G = cfg.o_groups, O = cfg.o_lora, gin = H * d / G;
  DSV4_ASSIGN_OR_RETURN(float* o, take<float>(ar, R * H * d, "attention o"));
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  DSV4_CUDA_LAUNCH(v4_sparse_attention(q, kvn, t.pv, t.row_piece, c.pos, R, H, d, rd, cfg.window, cap, sel, n_sel, A.sink,
                                       scale, A.freqs, nf, G, o, s), "sparse attention", shape(H * d, cfg.window + n_sel));
  DSV4_CUDA_LAUNCH(v4_window_write(t.pv, t.row_piece, R, cap, kvp, wrow, s), "window ring write", shape(wrow, d));
  if (kp) DSV4_CUDA_LAUNCH(v4_proj_ring_write(t.pv, t.row_piece, R, pcap, kp, gp, w, false, s), "projection ring write", shape(w, d));
  if (ikp)
    DSV4_CUDA_LAUNCH(v4_proj_ring_write(t.pv, t.row_piece, R, pcap, ikp, igp, iw, true, s), "indexer projection ring write",
                     shape(iw, d));

  // Output: grouped wo_a (bf16, block-diagonal) then FP8 wo_b.
  DSV4_ASSIGN_OR_RETURN(float* z, take<float>(ar, R * G * O, "attention z"));
  DSV4_CUDA_LAUNCH(bf16_grouped_linear(o, R, Bf16View{A.wo_a.w, G * O, gin}, G, z, s), "wo_a grouped", shape(G * O, gin));
  DSV4_CUDA_LAUNCH(fp8_linear(z, R, A.wo_b, ab, y, s), "wo_b", shape(cfg.dim, G * O));
  ar.reset(mark);
  return ok_status();
}

}  // namespace dsv4::cuda
