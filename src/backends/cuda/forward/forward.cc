// The CUDA forward: one call over every piece and its device work (streams: forward_streams.cc; drafts: forward_drafts.cc; see forward.h).
#include "backends/cuda/forward/forward.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "backends/cuda/runtime/arena.h"
#include "backends/cuda/forward/attention.h"
#include "backends/cuda/kernels/attention/attention_kernels.cuh"
#include "backends/cuda/forward/attention_state.h"
#include "backends/cuda/kernels/block/block_ops.cuh"
#include "backends/cuda/runtime/check.h"
#include "backends/cuda/tp/collective.h"
#include "backends/cuda/forward/dspark_device.h"
#include "backends/cuda/forward/forward_block.h"
#include "backends/cuda/forward/forward_v4.h"
#include "backends/cuda/tp/tp_forward.h"
#include "family/deepseek_v41/engram_hash.h"

namespace dsv4::cuda {

namespace {

// Scratch of the forward's own buffers for a call of `rows` rows (attention adds its own).
int64_t forward_scratch_bytes(const family::ModelPlan& cfg, int64_t rows) {
  const int64_t C = cfg.hc_mult, D = cfg.dim, nm = C * (C + 2);
  const int64_t E = std::max<int64_t>(cfg.n_experts, cfg.dspark_experts), K = std::max(cfg.n_active, cfg.dspark_active);
  const int64_t I = cfg.moe_inter;
  const int64_t R = static_cast<int64_t>(cfg.engram_max_ngram - 1) * cfg.engram_heads;
  const int64_t n_taps = static_cast<int64_t>(cfg.dspark_target_layers.size());
  int64_t f = 0;
  f += rows * (C * D + C) + rows * (2 + 2);                    // h, pi, ids, pos
  f += rows * n_taps * D + 4 * rows * D;                       // taps, DSpark main rows and keys
  f += rows * static_cast<int64_t>(cfg.engram_layers.size()) * R * 2;  // Engram table rows
  int64_t layer = 3 * rows * D + 3 * rows * nm;                // block x, xn, y, mixes
  const int64_t moe = rows * E + 7 * rows * K + moe_pairs_scratch(rows, K, E) + rows * K * D + rows * K * 3 * I +
                      3 * rows * I + rows * D;
  const int64_t engram = rows * R * cfg.engram_head_dim + rows * (C + 1) * D;
  layer += std::max(moe, engram);
  const int64_t head = rows * (C * D + C + 2 * D + cfg.vocab + 2);
  const int64_t draws = static_cast<int64_t>(row_draw_scratch_bytes(rows, cfg.vocab)) +
                        rows * static_cast<int64_t>(sizeof(RowPickDev));  // row draws (after the head)
  return (f + std::max(layer, head)) * 4 + draws + (64 << 20);
}

// Mapped Engram tables: the rows a call hashes to, gathered on the host in call-row order (codes e4m3 [n, dim],
// scales ue8m0 [n, dim / 32]); `rows` becomes 0..n-1, their places in the gathered arrays.
void gather_engram_rows(const EngramDevice& E, std::vector<int64_t>& rows, std::vector<uint8_t>& codes,
                        std::vector<uint8_t>& scales) {
  const int64_t dim = E.dim, sdim = dim / 32, n = static_cast<int64_t>(rows.size());
  codes.resize(static_cast<size_t>(n * dim));
  scales.resize(static_cast<size_t>(n * sdim));
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(&codes[i * dim], E.table.bytes() + rows[i] * dim, static_cast<size_t>(dim));
    std::memcpy(&scales[i * sdim], E.table_scale.bytes() + rows[i] * sdim, static_cast<size_t>(sdim));
    rows[i] = i;
  }
}

}  // namespace

StatusOr<std::unique_ptr<Forward>> Forward::create(std::shared_ptr<const ModelDevice> model,
                                                   const ForwardOptions& options) {
  if (!model) return error(StatusCode::invalid_argument, "no model");
  if (options.max_call_rows < 1) return error(StatusCode::invalid_argument, "max_call_rows < 1");
  std::unique_ptr<Forward> f(new Forward());
  f->model_ = std::move(model);
  f->options_ = options;
  const family::ModelPlan& cfg = f->model_->config;
  DSV4_ASSIGN_OR_RETURN(family::StateGeometry g,
                        device_state_geometry(cfg, options.max_context, options.max_rollback, f->model_->dspark != nullptr));
  f->geo_ = std::make_unique<family::StateGeometry>(std::move(g));
  DSV4_ASSIGN_OR_RETURN(f->pages_, family::page_layout(*f->geo_, options.kv_page_positions));
  KvPoolShape pool{f->pages_.slab_bytes, f->pages_.page_bytes};
  if (options.kv_pool_streams > 0) {
    pool.slabs = options.kv_pool_streams;
    pool.pages = options.kv_pool_positions > 0 ? f->pages_.pages_for(options.kv_pool_positions)
                                               : options.kv_pool_streams * f->pages_.pages_for(options.max_context);
  }
  DSV4_ASSIGN_OR_RETURN(f->pool_, KvPool::create(pool));
  f->replay_ = family::replay_shape(cfg, f->geo_->ring_capacity, f->model_->dspark != nullptr);
  DSV4_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&f->stream_, cudaStreamNonBlocking), "creating the forward's stream"));
  DSV4_RETURN_IF_ERROR(create_side_stream(f->side_));
  const int64_t rows = options.max_call_rows;
  int64_t tp_bytes = 0;  // tensor-parallel gathers (tp_forward.h): head rows, expert outputs, output groups
  if (options.collective) {
    const int64_t world = options.collective->world(), P = rows * std::max(cfg.n_active, cfg.dspark_active);
    tp_bytes = 4 * (rows * cfg.vocab + (world + 1) * P * cfg.dim + P + 2 * world * rows * cfg.o_groups * cfg.o_lora +
                    (world + 1) * rows * cfg.dim) +
               (4 << 20);
  }
  const int64_t bytes = forward_scratch_bytes(cfg, rows) + tp_bytes +
                        attention_scratch_bytes(cfg, rows, options.max_context) +
                        dspark_scratch_bytes(cfg);
  f->scratch_ = std::make_unique<Arena>(static_cast<size_t>(bytes));
  f->meta_ = std::make_unique<CallMeta>();
  f->graphs_ = std::make_unique<GraphCache>(GraphCacheOptions{options.graph_capacity, 1});
  if (f->scratch_->capacity() < static_cast<size_t>(bytes))
    return error(StatusCode::resource_exhausted, "cannot allocate {} MiB of forward scratch for {} rows per call",
                 bytes >> 20, rows);
  return f;
}

Forward::~Forward() {
  graphs_.reset();
  streams_.clear();
  if (stream_) cudaStreamDestroy(stream_);
  destroy_side_stream(side_);
}

StatusOr<std::vector<engine::PieceResult>> Forward::forward(const std::vector<engine::Piece>& pieces) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<engine::PieceResult> out;
  std::vector<std::span<const float>> rows;
  DSV4_RETURN_IF_ERROR(forward_locked(pieces, &out, &rows));
  for (size_t i = 0; i < out.size(); ++i) out[i].logits.assign(rows[i].begin(), rows[i].end());
  return out;
}

Status Forward::forward_viewed(const std::vector<engine::Piece>& pieces, std::vector<engine::PieceResult>* out,
                               std::vector<std::span<const float>>* rows) {
  std::lock_guard<std::mutex> lock(mu_);
  return forward_locked(pieces, out, rows);
}

Status Forward::forward_locked(const std::vector<engine::Piece>& pieces, std::vector<engine::PieceResult>* out,
                               std::vector<std::span<const float>>* rows) {
  const family::ModelPlan& cfg = model_->config;
  // The step's plan checks every piece before any state is touched; with bounded replay it holds each layer's
  // rows (probes see every row; the V4 attention runs every row).
  auto length = [&](int32_t id) -> StatusOr<int64_t> {
    auto it = streams_.find(id);
    if (it == streams_.end()) return error(StatusCode::not_found, "no stream {}", id);
    return it->second.caches->length();
  };
  // Calls carrying given rows (an image span) run every row: the bounded layers' tables carry no image flags.
  bool given = false;
  for (const engine::Piece& pc : pieces) given = given || !pc.embeds.empty();
  engine::StepLimits limits{cfg.vocab, options_.max_context, options_.max_call_rows, nullptr,
                            options_.collective ? 0 : cfg.dim};
  if (options_.bounded_replay && !probe_ && !op_probe_ && !given && cfg.window_format != KvRowFormat::model1)
    limits.replay = &replay_;
  DSV4_ASSIGN_OR_RETURN(const engine::StepPlan plan, engine::plan_step(pieces, length, limits));
  const CallDraws cd = call_draws(pieces, cfg.vocab);
  const std::vector<RowDrawDev>& draws = cd.draws;
  std::vector<size_t> hist_len;
  for (const engine::Piece& pc : pieces) hist_len.push_back(streams_.at(pc.stream).history.size());
  const size_t mark = scratch_->mark();
  Status st = run(plan, draws, cd.masks);
  // The one synchronization of a call: the logits rows are in logits_host_ after it (and the picks in picks_host_).
  const Status sync = cuda_status(cudaStreamSynchronize(stream_), "synchronizing after the forward");
  if (st.ok()) st = sync;
  if (st.ok() && !draws.empty()) st = collect_draws(pieces, draws, out, rows);  // reads logits_dev_: before the reset
  scratch_->reset(mark);
  logits_dev_ = nullptr;
  if (!marks_.empty()) {
    const Status collected = profile_marks_collect(marks_, profile_);
    if (st.ok()) st = collected;
  }
  if (!layer_marks_.empty()) {
    const Status collected = layer_marks_collect(layer_marks_, layer_times_);
    if (st.ok()) st = collected;
  }
  if (!st.ok()) {
    for (size_t i = 0; i < pieces.size(); ++i) streams_.at(pieces[i].stream).history.resize(hist_len[i]);
    return st;
  }
  if (!draws.empty()) return ok_status();
  out->assign(pieces.size(), {});
  rows->clear();
  const int64_t V = cfg.vocab;
  const float* host = static_cast<const float*>(logits_host_.data());
  int64_t at = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const int64_t k = static_cast<int64_t>(pieces[i].logit_rows.size());
    rows->emplace_back(k ? host + at * V : nullptr, static_cast<size_t>(k * V));
    at += k;
  }
  return ok_status();
}

OpCtx Forward::op_ctx(cudaStream_t s) {
  OpCtx o{&model_->config, s, scratch_.get()};
  o.collective = options_.collective.get();
  o.side = side_;
  if (profile_ && profile_sync_) o.profile = profile_;
  if (profile_ && !profile_sync_) o.marks = &marks_;
  return o;
}

struct Forward::DeviceCall {
  CallCtx* c = nullptr;
  const engine::StepPlan* plan = nullptr;   // with c->layer_rows (bounded replay): each layer's rows
  const int32_t* ids = nullptr;             // device [rows]
  std::vector<const int64_t*> engram_rows;  // per Engram layer, device [rows, R]: table rows (pinned tables) or
                                            // 0..rows*R-1 into the rows gathered below (mapped tables)
  std::vector<const uint8_t*> engram_codes, engram_scales;  // per layer: the table, or its gathered rows
  float* h = nullptr;                       // bf16 [rows, C, D]
  float* pi = nullptr;                      // f32 [rows, C]
  float* taps = nullptr;                    // bf16 [tap rows, n_taps, D] or null (plan->taps: each piece's last ring
                                            // rows with bounded replay, else every row)
  std::vector<const int64_t*> tap_at;       // per layer, device [tap rows]: their rows among the layer's input rows
                                            // (null: the same rows)
  const uint16_t* given = nullptr;          // device bf16 [n_given, D]: rows fed given embeddings (an image span)
  const int64_t* given_rows = nullptr;      // device [n_given]: their call rows
  int64_t n_given = 0;
  const uint8_t* image = nullptr;           // device u8 [rows]: image positions (MoE bias_vl, Engram gate 0), or null
                                            // (never with bounded replay: such calls run every row)
  const int64_t* index = nullptr;           // device [n] call rows whose logits are asked for
  int64_t n_logits = 0;
  float* logits = nullptr;                  // f32 [n, V]
  size_t mark = 0;                          // scratch above this is the device work's own
};

Status Forward::device_call(const DeviceCall& d, cudaStream_t s) {
  const ModelDevice& M = *model_;
  const family::ModelPlan& cfg = M.config;
  const int C = cfg.hc_mult;
  const int64_t D = cfg.dim, rows = d.c->rows;
  // A failed capture is followed by an eager run of the same work: start from the same scratch.
  scratch_->reset(d.mark);
  OpCtx o = op_ctx(s);
  o.ids = d.ids;
  o.op_probe = op_probe_ ? &op_probe_ : nullptr;
  o.routing_probe = routing_probe_ ? &routing_probe_ : nullptr;
  DSV4_RETURN_IF_ERROR(embed_rows(o, M, d.ids, rows, d.h, d.pi));  // a rank's: its vocabulary rows, gathered
  DSV4_CUDA_LAUNCH(embed_given(d.given, d.given_rows, d.n_given, C, D, d.h, s), "embed_given",
                   shape_text({{"rows", d.n_given}, {"D", D}}));
  const int n_taps = static_cast<int>(cfg.dspark_target_layers.size());
  const bool bounded = !d.c->layer_rows.empty();
  std::vector<float> probe_host;
  for (int l = 0; l < cfg.n_layers; ++l) {
    const family::LayerPlan& role = M.config.layers[l];
    const LayerDevice& L = M.layers[l];
    const size_t layer_mark = scratch_->mark();
    o.layer = l;
    if (layer_times_) DSV4_RETURN_IF_ERROR(layer_mark_begin(layer_marks_, l, s));
    // The layer reads h at its input rows and leaves it at its output rows (bounded replay), else every row.
    const int64_t rows_in = bounded ? d.c->layer_rows[l].in.rows : rows;
    const int64_t rows_out = bounded ? d.c->layer_rows[l].out.rows : rows;
    const int64_t* keep = bounded ? d.c->layer_rows[l].keep : nullptr;
    o.ids = rows_in == rows && rows_out == rows ? d.ids : nullptr;  // hash routing lies below every bounded layer
    if (role.engram && rows_in != rows)
      return error(StatusCode::internal, "layer {}: Engram on {} of {} rows", l, rows_in, rows);
    if (role.engram) {
      DSV4_RETURN_IF_ERROR(timed(o, "engram", [&] {
        const int e = role.engram_index;
        return engram_forward(o, *L.engram, d.engram_codes[e], d.engram_scales[e], d.engram_rows[e], rows, d.h,
                              d.image);
      }));
      DSV4_RETURN_IF_ERROR(op_probe(o, "engram", d.h, rows * C * D));
    }
    if (role.dspark_tap_index >= 0 && d.taps) {
      const int64_t tr = d.plan->taps.rows;
      const auto tshape = shape_text({{"rows", tr}, {"layer", l}});
      if (!d.tap_at[l]) {
        DSV4_CUDA_LAUNCH(dspark_tap(d.h, tr, C, D, n_taps, role.dspark_tap_index, d.taps, s), "dspark_tap", tshape);
      } else {  // the tapped rows gathered from the layer's input rows first
        const size_t mark = scratch_->mark();
        DSV4_ASSIGN_OR_RETURN(float* ht, o.alloc<float>(tr * C * D, "tapped streams"));
        DSV4_CUDA_LAUNCH(gather_rows(d.h, d.tap_at[l], tr, C * D, ht, s), "gather_rows(taps)", tshape);
        DSV4_CUDA_LAUNCH(dspark_tap(ht, tr, C, D, n_taps, role.dspark_tap_index, d.taps, s), "dspark_tap", tshape);
        scratch_->reset(mark);
      }
    }
    AttnFn attn = [&](const float* x, float* y) { return attention_layer(*d.c, l, x, y); };
    DSV4_RETURN_IF_ERROR(block_forward_rows(o, L, rows_in, keep, rows_out, attn, d.image, d.h, d.pi));
    scratch_->reset(layer_mark);
    if (layer_times_) DSV4_RETURN_IF_ERROR(layer_mark_end(layer_marks_, s));
    if (probe_) {  // never captured: the forward runs eagerly while a probe is set
      probe_host.resize(rows * C * D);
      DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(probe_host.data(), d.h, probe_host.size() * 4,
                                                       cudaMemcpyDeviceToHost, s), "copying the layer probe"));
      DSV4_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(s), "layer probe"));
      probe_(l, probe_host);
    }
  }
  o.layer = cfg.n_layers;  // the head's probes ("final_norm") come as the layer after the last
  if (d.n_logits > 0)
    DSV4_RETURN_IF_ERROR(timed(o, "head", [&] {
      if (o.collective) return tp_head_logits(o, M, d.h, d.pi, d.index, d.n_logits, d.logits);  // vocabulary rows, gathered
      return M.hc_head ? head_logits_v4(o, M, d.h, d.index, d.n_logits, d.logits)
                       : head_logits(o, M.norm, M.head, M.head16, d.h, d.pi, d.index, d.n_logits, d.logits);
    }));
  scratch_->reset(d.mark);
  return ok_status();
}

Status Forward::run(const engine::StepPlan& plan, std::span<const RowDrawDev> draws, std::span<const uint64_t> masks) {
  const int64_t n_logits = plan.logit_rows();
  const ModelDevice& M = *model_;
  const family::ModelPlan& cfg = M.config;
  const int C = cfg.hc_mult;
  const int64_t D = cfg.dim, V = cfg.vocab;
  CallCtx c;
  c.model = &M;
  c.cfg = &cfg;
  c.roles = &M.config.layers;
  c.attn = M.attention.data();
  c.stream = stream_;
  c.side = side_;
  c.scratch = scratch_.get();
  c.collective = options_.collective.get();
  // Host side of the call: ids, positions, Engram hash rows and logit rows, staged in pinned memory.
  const std::vector<int32_t>& ids = plan.ids;
  const std::vector<int64_t>& pos = plan.pos;
  // Pages for every piece's new positions first, all or none from a fixed pool (a short pool touches no stream).
  int64_t wanted = 0;
  for (const engine::PiecePlan& p : plan.pieces) wanted += streams_.at(p.stream).caches->pages_wanted(p.start + p.rows);
  if (pool_->shape().fixed() && wanted > pool_->free_pages())
    return error(StatusCode::resource_exhausted, "KV pool: the call's streams need {} more pages of {} KiB, {} of {} free",
                 wanted, pages_.page_bytes >> 10, pool_->free_pages(), pool_->shape().pages);
  for (const engine::PiecePlan& p : plan.pieces)
    DSV4_RETURN_IF_ERROR(streams_.at(p.stream).caches->reserve(p.start + p.rows, stream_));
  std::vector<StreamSlot*> slots;
  for (const engine::PiecePlan& p : plan.pieces) {
    StreamSlot& s = streams_.at(p.stream);
    slots.push_back(&s);
    c.pieces.push_back(DevicePiece{s.caches.get(), p.start, p.rows, p.row0});
    for (int64_t i = 0; i < p.rows; ++i) {
      const int32_t t = ids[p.row0 + i];
      const bool image = !plan.image.empty() && plan.image[p.row0 + i];  // DEAD in the Engram history
      s.history.push_back(image ? -1 : M.engram_token_map.empty() ? t : M.engram_token_map[t]);
    }
  }
  c.rows = plan.rows();
  const int64_t rows = c.rows;
  if (rows == 0) return ok_status();
  const size_t n_engram = cfg.engram_layers.size();
  std::vector<std::vector<int64_t>> engram_host(n_engram);
  std::vector<std::vector<uint8_t>> engram_codes(n_engram), engram_scales(n_engram);
  for (size_t e = 0; e < n_engram; ++e) {
    const EngramDevice& E = *M.layers[cfg.engram_layers[e]].engram;
    const int64_t R = E.layout.cols;
    const int64_t pad = M.engram_token_map[cfg.engram_pad_id];
    engram_host[e].resize(rows * R);
    for (size_t i = 0; i < c.pieces.size(); ++i)
      for (int64_t t = 0; t < c.pieces[i].T; ++t) {
        const int64_t r = c.pieces[i].row0 + t;
        family::engram_hash_rows(E.layout, E.layout.layers[0], slots[i]->history.data(), pos[r], pad,
                                 &engram_host[e][r * R]);
      }
    if (!E.codes) gather_engram_rows(E, engram_host[e], engram_codes[e], engram_scales[e]);
  }
  const std::vector<int64_t>& index = plan.logit_index;
  // Upper bound of the metadata image: the parts above plus the attention tables (pieces per layer,
  // row pieces, groups completed per ratio).
  const int64_t P = static_cast<int64_t>(c.pieces.size());
  size_t meta_bytes = CallMeta::padded(rows * 4) + CallMeta::padded(rows * 8) + CallMeta::padded(n_logits * 8) +
                      CallMeta::padded(sizeof(PieceDev) * cfg.n_layers * rows) + CallMeta::padded(rows * 4) +
                      2 * CallMeta::padded(sizeof(EmitDev) * rows) + 256;
  meta_bytes += CallMeta::padded(draws.size() * sizeof(RowDrawDev)) + CallMeta::padded(draws.size() * 4) +
                CallMeta::padded(masks.size() * 8);  // row draws
  for (const auto& e : engram_host) meta_bytes += CallMeta::padded(e.size() * 8);
  // Given rows (an image span) and the image flags.
  const int64_t n_given = static_cast<int64_t>(plan.given.size());
  meta_bytes += CallMeta::padded(n_given * D * 2) + CallMeta::padded(n_given * 8) + CallMeta::padded(plan.image.size());
  for (size_t e = 0; e < n_engram; ++e)
    meta_bytes += CallMeta::padded(engram_codes[e].size()) + CallMeta::padded(engram_scales[e].size());
  if (cfg.window_format == KvRowFormat::model1) meta_bytes += attention_v4_meta_bytes(cfg, rows, rows);  // P <= rows
  // Bounded replay: the layers' row tables, the tapped rows' positions and places, the logit rows' places.
  meta_bytes += bounded_meta_bytes(cfg, rows, P) + (cfg.dspark_target_layers.size() + 1) * CallMeta::padded(rows * 8);
  bool moved = false;
  DSV4_RETURN_IF_ERROR(meta_->begin(meta_bytes, &moved));
  if (moved) graphs_->clear();  // captured graphs read the old metadata buffer
  DeviceCall d;
  d.c = &c;
  d.plan = &plan;
  d.n_logits = n_logits;
  DSV4_ASSIGN_OR_RETURN(d.ids, meta_->put_n(ids.data(), ids.size(), "token ids"));
  DSV4_ASSIGN_OR_RETURN(int64_t* d_pos, meta_->put_n(pos.data(), pos.size(), "positions"));
  for (size_t e = 0; e < n_engram; ++e) {
    DSV4_ASSIGN_OR_RETURN(int64_t* p, meta_->put_n(engram_host[e].data(), engram_host[e].size(), "Engram table rows"));
    d.engram_rows.push_back(p);
    const EngramDevice& E = *M.layers[cfg.engram_layers[e]].engram;
    if (E.codes) {  // pinned tables: the kernel reads the hashed rows in place
      d.engram_codes.push_back(E.codes);
      d.engram_scales.push_back(E.scales);
      continue;
    }
    DSV4_ASSIGN_OR_RETURN(uint8_t* gc, meta_->put_n(engram_codes[e].data(), engram_codes[e].size(), "Engram rows"));
    DSV4_ASSIGN_OR_RETURN(uint8_t* gs, meta_->put_n(engram_scales[e].data(), engram_scales[e].size(), "Engram scales"));
    d.engram_codes.push_back(gc);
    d.engram_scales.push_back(gs);
  }
  if (n_given > 0) {
    std::vector<uint16_t> values(static_cast<size_t>(n_given * D));
    std::vector<int64_t> given_rows;
    for (int64_t k = 0; k < n_given; ++k) {
      std::copy_n(plan.given[k].values, D, values.begin() + k * D);
      given_rows.push_back(plan.given[k].row);
    }
    DSV4_ASSIGN_OR_RETURN(d.given, meta_->put_n(values.data(), values.size(), "given embedding rows"));
    DSV4_ASSIGN_OR_RETURN(d.given_rows, meta_->put_n(given_rows.data(), given_rows.size(), "given rows' call rows"));
    d.n_given = n_given;
  }
  if (!plan.image.empty()) {
    DSV4_ASSIGN_OR_RETURN(d.image, meta_->put_n(plan.image.data(), plan.image.size(), "image rows"));
  }
  // The head reads h at the last layer's output rows (bounded replay): the logit rows' places among them.
  std::vector<int64_t> head_rows = index;
  if (plan.bounded()) {
    const engine::RowSpace& last = plan.out_rows(cfg.n_layers - 1);
    head_rows.clear();
    for (int64_t r : index) {
      const int32_t i = plan.piece_of[r];
      head_rows.push_back(last.row0[i] + (r - plan.pieces[i].row0) - last.first[i]);
    }
  }
  DSV4_ASSIGN_OR_RETURN(d.index, meta_->put_n(head_rows.data(), head_rows.size(), "logit rows"));
  // The tapped rows (each piece's last ring rows, or every row): their places among each tap layer's input rows.
  d.tap_at.assign(cfg.n_layers, nullptr);
  if (M.dspark)
    for (int l = 0; l < cfg.n_layers; ++l) {
      if (cfg.layers[l].dspark_tap_index < 0 || plan.taps == plan.in_rows(l)) continue;
      const std::vector<int64_t> at = engine::rows_within(plan.pieces, plan.taps, plan.in_rows(l));
      DSV4_ASSIGN_OR_RETURN(d.tap_at[l], meta_->put_n(at.data(), at.size(), "tapped rows"));
    }
  std::vector<DevicePiece> tap_pieces = c.pieces;
  const int64_t* tap_pos = nullptr;
  if (M.dspark && !(plan.taps == plan.all)) {
    for (size_t i = 0; i < tap_pieces.size(); ++i) {
      tap_pieces[i].start += plan.taps.first[i];
      tap_pieces[i].T -= plan.taps.first[i];
      tap_pieces[i].row0 = plan.taps.row0[i];
    }
    const std::vector<int64_t> tp = engine::space_positions(plan.pieces, plan.taps);
    DSV4_ASSIGN_OR_RETURN(tap_pos, meta_->put_n(tp.data(), tp.size(), "tapped positions"));
  }
  c.pos = d_pos;
  c.meta = meta_.get();
  // Graph key: every host-side size the launches depend on.
  // Tensor-parallel ranks capture their NCCL gathers with the rest: every rank runs the same calls in the same
  // order (rank 0's plans), so every rank sees the same keys, captures, replays and evicts alike, and a replay
  // enqueues the same collectives in the same order as the eager run it was captured from.
  // Calls whose rows shrink (bounded replay) run eagerly: their launch sizes and tables vary with the cones; so do
  // calls with given rows or image flags (prompt pieces of an image span): their metadata has other parts.
  const bool graph = graphs_on_ && options_.cuda_graphs && !probe_ && !op_probe_ && !routing_probe_ && !profile_ &&
                     !layer_times_ &&
                     rows <= options_.graph_max_rows && !plan.bounded() && plan.taps == plan.all && n_given == 0 &&
                     plan.image.empty();
  int64_t max_pos = 0;
  for (int64_t p : pos) max_pos = std::max(max_pos, p);
  // The key is the call's rows with the position bound and the logit rows: its tables take a layout of rows alone
  // (CallCtx::fixed_layout), so calls of any piece count and any groups completed replay one graph.
  c.fixed_layout = graph;
  std::vector<int64_t> dims;
  if (graph) {
    const int64_t g = std::max<int64_t>(options_.graph_pos_granule, 1);
    c.pos_bound = std::min((max_pos + 1 + g - 1) / g * g, std::max(options_.max_context, max_pos + 1));
  }
  OpCtx o = op_ctx(stream_);
  DSV4_ASSIGN_OR_RETURN(d.h, o.alloc<float>(rows * C * D, "streams h"));
  DSV4_ASSIGN_OR_RETURN(d.pi, o.alloc<float>(rows * C, "pre-mix pi"));
  const int64_t n_taps = static_cast<int64_t>(cfg.dspark_target_layers.size());
  if (M.dspark) {
    DSV4_ASSIGN_OR_RETURN(d.taps, o.alloc<float>(plan.taps.rows * n_taps * D, "DSpark taps"));
  }
  DSV4_ASSIGN_OR_RETURN(d.logits, o.alloc<float>(n_logits * V, "logits"));
  DSV4_RETURN_IF_ERROR(begin_attention_call(c));
  DSV4_RETURN_IF_ERROR(begin_bounded_call(c, plan));
  // Row draws: each logit row's reduction, and the rows that go whole (gathered for one copy). Read only by the
  // launches after the graph, they come after every part a graph reads: their sizes (masks, whole rows) are not in
  // the graph key and must not move those parts.
  const RowDrawDev* d_draws = nullptr;
  const uint64_t* d_masks = nullptr;
  const int32_t* d_whole = nullptr;
  std::vector<int32_t> whole;
  for (size_t j = 0; j < draws.size(); ++j)
    if (draws[j].kind == kDrawWhole) whole.push_back(static_cast<int32_t>(j));
  if (!draws.empty()) {
    DSV4_ASSIGN_OR_RETURN(d_draws, meta_->put_n(draws.data(), draws.size(), "row draws"));
    if (!masks.empty()) {
      DSV4_ASSIGN_OR_RETURN(d_masks, meta_->put_n(masks.data(), masks.size(), "token masks"));
    }
    if (!whole.empty()) {
      DSV4_ASSIGN_OR_RETURN(d_whole, meta_->put_n(whole.data(), whole.size(), "whole logit rows"));
    }
  }
  layer_rows_.assign(cfg.n_layers, rows);
  for (int l = 0; l < cfg.n_layers && !c.layer_rows.empty(); ++l) layer_rows_[l] = c.layer_rows[l].out.rows;
  DSV4_RETURN_IF_ERROR(meta_->upload(stream_));
  d.mark = scratch_->mark();
  auto work = [&](cudaStream_t s) { return device_call(d, s); };
  if (graph) {
    dims.push_back(c.pos_bound);
    dims.push_back(n_logits);
    const GraphKey key{1, rows, std::move(dims)};
    DSV4_RETURN_IF_ERROR(graphs_->run(key, stream_, work));
  } else {
    DSV4_RETURN_IF_ERROR(work(stream_));
  }
  // DSpark rings receive one row per main position (per-stream ring pointers: not in the graph).
  if (M.dspark) {
    DSV4_RETURN_IF_ERROR(timed(o, "dspark rings", [&] {
      if (tap_pos) return dspark_write_rings(o, M, tap_pieces, tap_pos, plan.taps.rows, d.taps);
      return dspark_write_rings(o, M, c.pieces, d_pos, rows, d.taps);
    }));
  }
  logits_dev_ = d.logits;
  if (n_logits > 0) DSV4_RETURN_IF_ERROR(logits_host_.reserve(static_cast<size_t>(n_logits * V) * 4));
  if (n_logits > 0 && draws.empty()) {
    DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(logits_host_.data(), d.logits, n_logits * V * 4,
                                                     cudaMemcpyDeviceToHost, stream_), "copying logits"));
  } else if (n_logits > 0) {
    // Reduced rows leave the device as a few values each; the whole rows are gathered and copied in one piece.
    DSV4_RETURN_IF_ERROR(timed(o, "row draws", [&]() -> Status {
      RowDrawPasses passes;
      for (const RowDrawDev& r : draws) {
        passes.truncated = passes.truncated || r.kind == kDrawTruncated;
        passes.logprobs = passes.logprobs || (r.kind != kDrawWhole && (r.partition || r.top_n > 0 || r.proposed >= 0));
      }
      DSV4_ASSIGN_OR_RETURN(uint8_t * scratch,
                            o.alloc<uint8_t>(static_cast<int64_t>(row_draw_scratch_bytes(n_logits, V)), "row draw scratch"));
      DSV4_ASSIGN_OR_RETURN(RowPickDev * picks, o.alloc<RowPickDev>(n_logits, "row picks"));
      DSV4_CUDA_LAUNCH(row_draws(d.logits, n_logits, V, d_draws, d_masks, passes, scratch, picks, stream_), "row_draws",
                       shape_text({{"rows", n_logits}, {"V", V}}));
      DSV4_RETURN_IF_ERROR(picks_host_.reserve(static_cast<size_t>(n_logits) * sizeof(RowPickDev)));
      DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(picks_host_.data(), picks, n_logits * sizeof(RowPickDev),
                                                       cudaMemcpyDeviceToHost, stream_), "copying row picks"));
      if (whole.empty()) return ok_status();
      const int64_t n_whole = static_cast<int64_t>(whole.size());
      auto packed = o.alloc<float>(n_whole * V, "whole logit rows");
      if (!packed.ok()) {  // no room to gather: one copy per whole row instead (the same bytes)
        for (int64_t k = 0; k < n_whole; ++k)
          DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(static_cast<float*>(logits_host_.data()) + k * V,
                                                           d.logits + whole[k] * V, V * 4, cudaMemcpyDeviceToHost,
                                                           stream_), "copying a logits row"));
        return ok_status();
      }
      DSV4_CUDA_LAUNCH(gather_logit_rows(d.logits, V, d_whole, n_whole, *packed, stream_), "gather_logit_rows",
                       shape_text({{"rows", n_whole}, {"V", V}}));
      return cuda_status(cudaMemcpyAsync(logits_host_.data(), *packed, n_whole * V * 4, cudaMemcpyDeviceToHost, stream_),
                         "copying whole logits rows");
    }));
  }
  for (const DevicePiece& p : c.pieces) DSV4_RETURN_IF_ERROR(p.caches->commit(p.start + p.T));
  return ok_status();
}

namespace {
class CudaForward final : public engine::StreamForward {
 public:
  explicit CudaForward(std::unique_ptr<Forward> f) : f_(std::move(f)) {}
  const family::ModelPlan& config() const override { return f_->config(); }
  bool has_drafter() const override { return f_->model().dspark != nullptr; }
  uint32_t snapshot_version() const override { return 0x43554432; }  // "CUD2": the CUDA snapshot format (split)
  // Given embedding rows on one GPU; a tensor-parallel rank takes none (its plans carry tokens only).
  int64_t embed_dim() const override { return f_->options().collective ? 0 : f_->config().dim; }
  int64_t pooled_stream_bytes(int64_t rows) const override {
    if (!f_->kv_pool().shape().fixed()) return -1;
    return f_->page_layout().pages_for(rows) * f_->page_layout().page_bytes;
  }
  int64_t pool_budget_bytes() const override {
    const KvPoolShape& s = f_->kv_pool().shape();
    return s.fixed() ? s.pages * s.page_bytes : 0;
  }
  StatusOr<int32_t> open_stream() override { return f_->open_stream(); }
  Status close_stream(int32_t s) override { return f_->close_stream(s); }
  StatusOr<int64_t> length(int32_t s) const override { return f_->length(s); }
  StatusOr<std::vector<engine::PieceResult>> forward(const std::vector<engine::Piece>& p) override { return f_->forward(p); }
  Status forward_viewed(const std::vector<engine::Piece>& p, std::vector<engine::PieceResult>* out,
                        std::vector<std::span<const float>>* rows) override {
    return f_->forward_viewed(p, out, rows);
  }
  Status truncate(int32_t s, int64_t n) override { return f_->truncate(s, n); }
  StatusOr<std::vector<uint8_t>> snapshot(int32_t s) const override { return f_->snapshot(s); }
  Status restore(int32_t s, const std::vector<uint8_t>& b) override { return f_->restore(s, b); }
  StatusOr<engine::DraftResult> draft(int32_t s, int32_t next) override { return f_->draft(s, next); }
  StatusOr<std::vector<engine::DraftResult>> draft_batch(std::span<const engine::DraftAsk> asks, bool logits) override {
    return f_->draft_batch(asks, logits);
  }
  std::vector<family::RowTableShape> row_tables() const override { return f_->row_tables(); }
  StatusOr<engine::StateParts> snapshot_parts(int32_t s, int64_t from) const override { return f_->snapshot_parts(s, from); }
  Status restore_parts(int32_t s, std::span<const uint8_t> bounded,
                       std::span<const std::vector<std::span<const uint8_t>>> tables) override {
    return f_->restore_parts(s, bounded, tables);
  }

 private:
  std::unique_ptr<Forward> f_;
};
}  // namespace

std::unique_ptr<engine::StreamForward> cuda_stream_forward(std::unique_ptr<Forward> forward) {
  return std::make_unique<CudaForward>(std::move(forward));
}

}  // namespace dsv4::cuda
