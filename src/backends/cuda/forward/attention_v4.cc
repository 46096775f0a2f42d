// V4 / 0731 attention of one backbone layer on the device: the launch sequence of
// cpu::attention_layer with cfg.v4() (model-spec.md §8) — query with the per-head bf16 norm, V4
// window rows, every compressed layer's own gated compressor (ratio 4 overlapped with its
// Hadamard FP4 indexer and descending top-k, larger ratios attending every visible row), sparse
// attention over V4 rows, grouped output. The layer reads the call's tables (V4CallTables, built
// once per call by begin_attention_call_v4 into the call's metadata), so a call launches without
// host work between layers and can be captured as a CUDA graph.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backends/cuda/runtime/arena.h"
#include "backends/cuda/kernels/attention/attention_kernels.cuh"
#include "backends/cuda/forward/attention_state.h"
#include "backends/cuda/model/attention_weights.h"
#include "backends/cuda/runtime/call_meta.h"
#include "backends/cuda/kernels/attention/attn_v4.cuh"
#include "backends/cuda/runtime/check.h"
#include "backends/cuda/forward/forward_v4.h"
#include "backends/cuda/kernels/linear/linear.cuh"
#include "backends/cuda/model/upload.h"

namespace dsv4::cuda {

// Per-call device tables of V4 attention: per (layer, piece) the V4 view of the stream's caches
// (PieceV4) and the PieceDev view index_scores reads, the piece of every row, and per distinct
// compression ratio the groups this call completes (launch sizes: n_emit) and the widest
// compressed-row count (max_lc, widened to pos_bound / ratio when a position bound is set).
struct V4CallTables {
  int64_t n_pieces = 0;
  int64_t stride = 0;            // entries per layer: n_pieces, or rows (CallCtx::fixed_layout)
  PieceV4* pv = nullptr;         // device [n_layers, stride]
  PieceDev* pd = nullptr;        // device [n_layers, stride]
  int32_t* row_piece = nullptr;  // device [rows]
  std::vector<int> ratios;       // distinct ratios > 0 of the layers, ascending
  std::vector<EmitDev*> emit;    // device, by ratios[i]
  std::vector<int64_t> n_emit, max_lc;
  std::vector<uint8_t> staging;  // host image (kept for the copy when no CallMeta is set)

  int slot(int ratio) const {
    for (size_t i = 0; i < ratios.size(); ++i)
      if (ratios[i] == ratio) return static_cast<int>(i);
    return -1;
  }
};

namespace {

std::map<std::string, double>* g_op_times = nullptr;  // set_v4_attention_timing (bench aid)

// Device time of each launch of one layer (bench aid, off unless set_v4_attention_timing is set and
// the stream is not capturing): an event pair around each launch, read when the layer returns.
class OpTimer {
 public:
  OpTimer(cudaStream_t s, int ratio) : s_(s), ratio_(ratio) {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    on_ = g_op_times && cudaStreamIsCapturing(s, &cs) == cudaSuccess && cs == cudaStreamCaptureStatusNone;
  }
  ~OpTimer() {
    if (!on_ || marks_.empty()) return;
    cudaEventSynchronize(marks_.back().e1);
    for (const Mark& m : marks_) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, m.e0, m.e1) == cudaSuccess)
        (*g_op_times)["ratio " + std::to_string(ratio_) + ": " + m.name] += ms;
      cudaEventDestroy(m.e0);
      cudaEventDestroy(m.e1);
    }
  }
  bool on() const { return on_; }
  void begin() {
    if (!on_) return;
    Mark m;
    cudaEventCreate(&m.e0);
    cudaEventCreate(&m.e1);
    cudaEventRecord(m.e0, s_);
    marks_.push_back(m);
  }
  void end(const char* name) {
    if (!on_) return;
    marks_.back().name = name;
    cudaEventRecord(marks_.back().e1, s_);
  }

 private:
  struct Mark {
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    std::string name;
  };
  cudaStream_t s_;
  int ratio_;
  bool on_ = false;
  std::vector<Mark> marks_;
};

std::vector<int> v4_ratios(const family::ModelPlan& cfg) {
  std::vector<int> r;
  for (int x : cfg.compress_ratios)
    if (x > 0 && std::find(r.begin(), r.end(), x) == r.end()) r.push_back(x);
  std::sort(r.begin(), r.end());
  return r;
}

template <typename T>
StatusOr<T*> take(Arena& a, int64_t n, std::string_view what) {
  DSV4_ASSIGN_OR_RETURN(void* p, arena_alloc(a, static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(T), what));
  return static_cast<T*>(p);
}

int64_t align256(int64_t n) { return (n + 255) / 256 * 256; }

}  // namespace

// A launch of the layer, timed when set_v4_attention_timing is set.
#define V4_LAUNCH(expr, kernel, shape) \
  do {                                 \
    timer.begin();                     \
    DSV4_CUDA_LAUNCH(expr, kernel, shape); \
    timer.end(kernel);                 \
  } while (0)

void set_v4_attention_timing(std::map<std::string, double>* times) { g_op_times = times; }

size_t attention_v4_meta_bytes(const family::ModelPlan& cfg, int64_t rows, int64_t pieces) {
  const size_t LP = static_cast<size_t>(cfg.n_layers) * static_cast<size_t>(pieces);
  size_t b = CallMeta::padded(sizeof(PieceV4) * LP) + CallMeta::padded(sizeof(PieceDev) * LP) +
             CallMeta::padded(4 * static_cast<size_t>(rows));
  b += v4_ratios(cfg).size() * CallMeta::padded(sizeof(EmitDev) * static_cast<size_t>(rows));
  return b;
}

Status begin_attention_call_v4(CallCtx& c) {
  const family::ModelPlan& cfg = *c.cfg;
  auto t = std::make_shared<V4CallTables>();
  const int L = cfg.n_layers;
  const int64_t P = static_cast<int64_t>(c.pieces.size()), R = c.rows;
  const int64_t S = c.fixed_layout ? R : P;  // entries per layer (CallCtx::fixed_layout)
  t->n_pieces = P;
  t->stride = S;
  t->ratios = v4_ratios(cfg);
  const size_t nr = t->ratios.size();
  std::vector<PieceV4> pv(L * S);
  std::vector<PieceDev> pd(L * S);
  std::vector<int32_t> row_piece(R);
  std::vector<std::vector<EmitDev>> emit(nr);
  t->max_lc.assign(nr, 0);
  for (size_t k = 0; k < nr; ++k)
    if (c.pos_bound > 0) t->max_lc[k] = c.pos_bound / t->ratios[k];
  for (int64_t i = 0; i < P; ++i) {
    const DevicePiece& pc = c.pieces[i];
    for (int l = 0; l < L; ++l) {
      const LayerCachesDev& own = pc.caches->layer(l);  // V4: every compressed layer is its own KV source
      pv[l * S + i] = PieceV4{pc.start, pc.T, pc.row0, own.window, own.compressed, own.index_keys,
                              own.comp_kv, own.comp_gate, own.idx_comp_kv, own.idx_comp_gate};
      PieceDev& d = pd[l * S + i];
      d.start = pc.start;
      d.T = pc.T;
      d.row0 = pc.row0;
      d.window = own.window;
      d.comp = own.compressed;
      d.ikeys = own.index_keys;
    }
    for (int64_t r = 0; r < pc.T; ++r) {
      row_piece[pc.row0 + r] = static_cast<int32_t>(i);
      const int64_t p = pc.start + r;
      for (size_t k = 0; k < nr; ++k) {
        const int ratio = t->ratios[k];
        t->max_lc[k] = std::max(t->max_lc[k], (p + 1) / ratio);
        if ((p + 1) % ratio == 0) emit[k].push_back({static_cast<int32_t>(pc.row0 + r), static_cast<int32_t>(i), p / ratio});
      }
    }
  }
  if (c.fixed_layout)  // graph calls: every list R long, the padding skipped by the kernels
    for (std::vector<EmitDev>& e : emit) e.resize(R, EmitDev{-1, 0, 0});
  // Host image: pv [L, S], pd [L, S], row_piece, one emit list per ratio; each part 256-aligned.
  std::vector<int64_t> off(3 + nr + 1, 0);
  off[1] = off[0] + align256(sizeof(PieceV4) * L * S);
  off[2] = off[1] + align256(sizeof(PieceDev) * L * S);
  off[3] = off[2] + align256(4 * R);
  for (size_t k = 0; k < nr; ++k) off[4 + k] = off[3 + k] + align256(sizeof(EmitDev) * emit[k].size());
  const int64_t total = off[3 + nr];
  t->staging.assign(total, 0);
  std::memcpy(t->staging.data() + off[0], pv.data(), sizeof(PieceV4) * pv.size());
  std::memcpy(t->staging.data() + off[1], pd.data(), sizeof(PieceDev) * pd.size());
  std::memcpy(t->staging.data() + off[2], row_piece.data(), 4 * R);
  for (size_t k = 0; k < nr; ++k)
    if (!emit[k].empty()) std::memcpy(t->staging.data() + off[3 + k], emit[k].data(), sizeof(EmitDev) * emit[k].size());
  DSV4_ASSIGN_OR_RETURN(uint8_t* dev, put_call_tables(c.meta, *c.scratch, c.stream, t->staging, "V4 attention call tables"));
  t->pv = reinterpret_cast<PieceV4*>(dev + off[0]);
  t->pd = reinterpret_cast<PieceDev*>(dev + off[1]);
  t->row_piece = reinterpret_cast<int32_t*>(dev + off[2]);
  for (size_t k = 0; k < nr; ++k) {
    t->emit.push_back(reinterpret_cast<EmitDev*>(dev + off[3 + k]));
    t->n_emit.push_back(static_cast<int64_t>(emit[k].size()));
  }
  c.v4_tables = std::move(t);
  return ok_status();
}

int64_t attention_v4_extra_scratch_bytes(const family::ModelPlan& cfg, int64_t rows, int64_t max_pos) {
  const int64_t d = cfg.head_dim, ihd = cfg.index_head_dim;
  // The call tables when no CallMeta holds them (begin_attention_call_v4 takes them from scratch).
  const int64_t nr = static_cast<int64_t>(v4_ratios(cfg).size());
  const int64_t tables = rows * (cfg.n_layers * static_cast<int64_t>(sizeof(PieceV4) + sizeof(PieceDev)) + 4 +
                                 nr * static_cast<int64_t>(sizeof(EmitDev))) + (4 + nr) * 256;
  int64_t visible = 0;  // widest "every visible row" list of the layers without an indexer
  for (const family::LayerPlan& r : cfg.layers)
    if (r.compress_ratio > 0 && !r.index_source) visible = std::max(visible, (max_pos + 1) / r.compress_ratio);
  return 4 * (4 * rows * d + 4 * rows * ihd + rows * visible) + rows * (2 * d + 64) + tables + 16 * 256;
}

Status attention_layer_v4(CallCtx& c, int layer, const float* x, float* y) {
  const family::ModelPlan& cfg = *c.cfg;
  if (layer < 0 || layer >= cfg.n_layers) return error(StatusCode::invalid_argument, "attention layer {} out of range", layer);
  if (c.pieces.empty() || c.rows == 0) return ok_status();
  const family::LayerPlan& role = (*c.roles)[layer];
  const AttentionDevice& A = c.attn[layer];
  const family::StateGeometry& geo = c.pieces[0].caches->geometry();
  Arena& ar = *c.scratch;
  const size_t mark = ar.mark();
  const cudaStream_t s = c.stream;
  const int64_t R = c.rows, H = cfg.n_heads, d = cfg.head_dim, Q = cfg.q_lora, rd = cfg.rope_dim;
  const int ab = cfg.act_block, nf = cfg.rope_dim / 2, ratio = role.compress_ratio;
  const float eps = cfg.norm_eps;
  OpTimer timer(s, ratio);
  const int64_t cap = geo.ring_capacity, wrow = kv_model1_row_bytes(d, rd);
  if (geo.window_format != KvRowFormat::model1 || geo.window_row != wrow || (ratio > 0 && geo.compressed_row != wrow))
    return error(StatusCode::internal, "V4 attention layer {}: caches of another row format ({} B, expected {} B)", layer,
                 geo.window_row, wrow);
  auto shape = [&](int64_t out, int64_t in) { return shape_text({{"layer", layer}, {"rows", R}, {"out", out}, {"in", in}}); };
  if (!c.v4_tables) return error(StatusCode::invalid_argument, "V4 attention layer {}: begin_attention_call first", layer);
  const V4CallTables& ct = *c.v4_tables;
  // This layer's view of the call tables (the groups and widths of its ratio).
  struct {
    const PieceV4* pv;
    const PieceDev* pd;
    const int32_t* row_piece;
    const EmitDev* emit = nullptr;
    int64_t n_emit = 0, max_lc = 0;
  } t{ct.pv + layer * ct.stride, ct.pd + layer * ct.stride, ct.row_piece};
  if (ratio > 0) {
    const int k = ct.slot(ratio);
    if (k < 0) return error(StatusCode::internal, "V4 attention layer {}: no call tables for ratio {}", layer, ratio);
    t.emit = ct.emit[k];
    t.n_emit = ct.n_emit[k];
    t.max_lc = ct.max_lc[k];
  }

  // The window key (b) and the compressors (c) read only x and write nothing the query path reads:
  // with a side stream (and no per-launch timing) they run there beside the query (a) and the
  // indexer's query projections; the index scores and the sparse attention wait for them. The same
  // launches run either way.
  const bool beside = c.side && !timer.on();
  const cudaStream_t ks = beside ? c.side.stream : s;
  bool joined = !beside;
  auto join = [&]() -> Status {
    if (joined) return ok_status();
    joined = true;
    return join_side(c.side, s, "V4 attention: joining the key path");
  };
  if (beside) DSV4_RETURN_IF_ERROR(fork_side(c.side, s, "V4 attention: forking the key path"));

  // a. query: qr = q_norm(wq_a x); q = wq_b qr; per-head bf16 RMS norm, RoPE of each head's tail.
  DSV4_ASSIGN_OR_RETURN(float* qa, take<float>(ar, R * Q, "attention qa"));
  DSV4_ASSIGN_OR_RETURN(float* qr, take<float>(ar, R * Q, "attention qr"));
  DSV4_ASSIGN_OR_RETURN(float* q, take<float>(ar, R * H * d, "attention q"));
  V4_LAUNCH(fp8_linear(x, R, A.wq_a, ab, qa, s), "wq_a", shape(Q, cfg.dim));
  V4_LAUNCH(norm_rope_rows(qa, R, Q, A.q_norm, eps, nullptr, 0, c.pos, qr, nullptr, s), "q_norm", shape(Q, Q));
  V4_LAUNCH(fp8_linear(qr, R, A.wq_b, ab, q, s), "wq_b", shape(H * d, Q));
  V4_LAUNCH(v4_head_rms(q, R * H, d, eps, s), "q head norm", shape(H * d, d));
  V4_LAUNCH(rope_heads(q, R, H, d, A.freqs, nf, c.pos, false, false, s), "q rope", shape(H * d, d));

  // b. window key: kv_norm(wkv x), RoPE, QDQ into the V4 row (packed rows for the ring).
  DSV4_ASSIGN_OR_RETURN(float* kv, take<float>(ar, R * d, "attention kv"));
  DSV4_ASSIGN_OR_RETURN(float* kvn, take<float>(ar, R * d, "attention kvn"));
  DSV4_ASSIGN_OR_RETURN(uint8_t* kvp, take<uint8_t>(ar, R * wrow, "attention packed kv"));
  V4_LAUNCH(fp8_linear(x, R, A.wkv, ab, kv, ks), "wkv", shape(d, cfg.dim));
  V4_LAUNCH(norm_rope_rows(kv, R, d, A.kv_norm, eps, A.freqs, nf, c.pos, kvn, nullptr, ks), "kv norm/rope", shape(d, d));
  V4_LAUNCH(v4_pack_rows(kvn, R, d, rd, kvp, ks), "kv V4 rows", shape(wrow, d));

  // c. compressors: the indexer's (ratio 4) then the main one, rows of the groups this call completes.
  const int64_t w = geo.layers[layer].proj_kv.width, pcap = geo.layers[layer].proj_kv.capacity, iw = 2 * static_cast<int64_t>(cfg.index_head_dim);
  float *kp = nullptr, *gp = nullptr, *ikp = nullptr, *igp = nullptr;
  if (ratio > 0) {
    if (role.compressor_overlap) {
      DSV4_ASSIGN_OR_RETURN(ikp, take<float>(ar, R * iw, "indexer compressor kv projection"));
      DSV4_ASSIGN_OR_RETURN(igp, take<float>(ar, R * iw, "indexer compressor gate projection"));
      V4_LAUNCH(f32_linear_either(x, R, A.idx_comp_wkv32, A.idx_comp_wkv, ikp, ks), "indexer compressor wkv", shape(iw, cfg.dim));
      V4_LAUNCH(f32_linear_either(x, R, A.idx_comp_wgate32, A.idx_comp_wgate, igp, ks), "indexer compressor wgate",
                       shape(iw, cfg.dim));
      V4_LAUNCH(v4_compress(t.emit, t.n_emit, t.pv, ikp, igp, iw, true, ratio, pcap, A.idx_comp_ape, A.idx_comp_norm,
                                   eps, A.freqs, nf, true, rd, ks), "indexer compressor pool/keys", shape(iw, t.n_emit));
    }
    DSV4_ASSIGN_OR_RETURN(kp, take<float>(ar, R * w, "compressor kv projection"));
    DSV4_ASSIGN_OR_RETURN(gp, take<float>(ar, R * w, "compressor gate projection"));
    V4_LAUNCH(f32_linear_either(x, R, A.comp_wkv32, A.comp_wkv, kp, ks), "compressor wkv", shape(w, cfg.dim));
    V4_LAUNCH(f32_linear_either(x, R, A.comp_wgate32, A.comp_wgate, gp, ks), "compressor wgate", shape(w, cfg.dim));
    V4_LAUNCH(v4_compress(t.emit, t.n_emit, t.pv, kp, gp, w, role.compressor_overlap, ratio, pcap, A.comp_ape, A.comp_norm, eps,
                                 A.freqs, nf, false, rd, ks), "compressor pool/rows", shape(w, t.n_emit));
  }
  if (beside) DSV4_RETURN_IF_ERROR(end_side(c.side, "V4 attention: key path done"));

  // d. the compressed rows each query attends: ratio 4 by the indexer (descending score order),
  // larger ratios every visible row ascending.
  int32_t* sel = nullptr;
  int64_t n_sel = 0;
  if (ratio > 0 && role.index_source) {
    const int64_t IH = cfg.index_heads, ihd = cfg.index_head_dim, lc = t.max_lc;
    n_sel = cfg.index_topk;
    sel = c.topk;  // published [rows, index_topk] (begin_attention_call), as V4.1 index sources do
    if (lc == 0) {
      V4_LAUNCH(v4_all_rows(c.pos, R, ratio, n_sel, sel, s), "top-k (no rows yet)", shape(n_sel, 0));
    } else {
      DSV4_ASSIGN_OR_RETURN(float* qi, take<float>(ar, R * IH * ihd, "indexer queries"));
      DSV4_ASSIGN_OR_RETURN(float* wt, take<float>(ar, R * IH, "indexer weights"));
      DSV4_ASSIGN_OR_RETURN(float* sc, take<float>(ar, R * lc, "indexer scores"));
      V4_LAUNCH(fp8_linear(qr, R, A.idx_wq_b, ab, qi, s), "indexer wq_b", shape(IH * ihd, Q));
      V4_LAUNCH(rope_heads(qi, R, IH, ihd, A.freqs, nf, c.pos, false, false, s), "indexer q rope", shape(IH * ihd, ihd));
      V4_LAUNCH(v4_hadamard_fp4(qi, R * IH, ihd, s), "indexer q hadamard/qdq", shape(IH * ihd, ihd));
      V4_LAUNCH(bf16_linear(x, R, A.idx_weights_proj, wt, s), "indexer weights_proj", shape(IH, cfg.dim));
      const float wscale = static_cast<float>(std::pow(static_cast<double>(ihd), -0.5) * std::pow(static_cast<double>(IH), -0.5));
      DSV4_RETURN_IF_ERROR(join());
      V4_LAUNCH(index_scores(qi, wt, wscale, t.pd, t.row_piece, c.pos, R, IH, ihd, ratio, sc, lc, lc, s),
                       "index scores", shape(lc, IH * ihd));
      DSV4_ASSIGN_OR_RETURN(int32_t* tw, take<int32_t>(ar, topk_work_ints(R, lc, n_sel), "top-k chunks"));
      // v4_topk_desc's two launches, timed apart: the selection, then the descending order.
      V4_LAUNCH(topk_rows(sc, lc, c.pos, R, ratio, nullptr, 0, n_sel, sel, tw, s), "top-k", shape(n_sel, lc));
      V4_LAUNCH(v4_order_desc(sc, lc, R, n_sel, sel, s), "top-k order", shape(n_sel, n_sel));
    }
  } else if (ratio > 0 && t.max_lc > 0) {
    n_sel = t.max_lc;
    DSV4_ASSIGN_OR_RETURN(sel, take<int32_t>(ar, R * n_sel, "visible compressed rows"));
    V4_LAUNCH(v4_all_rows(c.pos, R, ratio, n_sel, sel, s), "visible compressed rows", shape(n_sel, 0));
  }

  // e. sparse attention over [window ; selected rows], inverse RoPE; then the ring writes.
  const int64_t G = cfg.o_groups, O = cfg.o_lora, gin = H * d / G;
  DSV4_ASSIGN_OR_RETURN(float* o, take<float>(ar, R * H * d, "attention o"));
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  DSV4_RETURN_IF_ERROR(join());
  V4_LAUNCH(v4_sparse_attention(q, kvn, t.pv, t.row_piece, c.pos, R, H, d, rd, cfg.window, cap, sel, n_sel, A.sink,
                                       scale, A.freqs, nf, G, o, s), "sparse attention", shape(H * d, cfg.window + n_sel));
  V4_LAUNCH(v4_window_write(t.pv, t.row_piece, R, cap, kvp, wrow, s), "window ring write", shape(wrow, d));
  if (kp) V4_LAUNCH(v4_proj_ring_write(t.pv, t.row_piece, R, pcap, kp, gp, w, false, s), "projection ring write", shape(w, d));
  if (ikp)
    V4_LAUNCH(v4_proj_ring_write(t.pv, t.row_piece, R, pcap, ikp, igp, iw, true, s), "indexer projection ring write",
                     shape(iw, d));

  // Output: grouped wo_a (bf16, block-diagonal) then FP8 wo_b.
  DSV4_ASSIGN_OR_RETURN(float* z, take<float>(ar, R * G * O, "attention z"));
  V4_LAUNCH(bf16_grouped_linear(o, R, Bf16View{A.wo_a.w, G * O, gin}, G, z, s), "wo_a grouped", shape(G * O, gin));
  V4_LAUNCH(fp8_linear(z, R, A.wo_b, ab, y, s), "wo_b", shape(cfg.dim, G * O));
  ar.reset(mark);
  return ok_status();
}

}  // namespace dsv4::cuda
