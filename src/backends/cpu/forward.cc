// The oracle's forward over a call's pieces, stream bookkeeping, rollback and snapshots.
#include "backends/cpu/forward.h"

#include <algorithm>
#include <optional>
#include <set>

#include "backends/cpu/attention.h"
#include "backends/cpu/block.h"
#include "backends/cpu/dspark.h"
#include "backends/cpu/engram.h"
#include "backends/cpu/head.h"
#include "family/deepseek_v41/layer_plan.h"
#include "backends/cpu/rope.h"
#include "family/deepseek_v41/engram_hash.h"
#include "engine/step_plan.h"

namespace dsv4::cpu {

StatusOr<std::unique_ptr<Oracle>> Oracle::create(std::shared_ptr<const family::Model> model,
                                                 const OracleOptions& options) {
  if (!model) return error(StatusCode::invalid_argument, "no model");
  const family::ModelPlan cfg = model->plan;
  DSV4_RETURN_IF_ERROR(family::check_plan(cfg));
  if (static_cast<int>(model->weights.layers.size()) != cfg.n_layers)
    return error(StatusCode::invalid_argument, "weights hold {} layers, config says {}", model->weights.layers.size(),
                 cfg.n_layers);
  if (!cfg.engram_layers.empty() && static_cast<int64_t>(model->engram_token_map.size()) != cfg.vocab)
    return error(StatusCode::invalid_argument, "Engram needs a token map of {} entries, got {}", cfg.vocab,
                 model->engram_token_map.size());
  if (options.max_rollback < 0) return error(StatusCode::invalid_argument, "max_rollback < 0");
  std::unique_ptr<Oracle> o(new Oracle());
  o->model_ = std::move(model);
  o->options_ = options;
  o->base_ = cfg;
  o->cfg_ = options.unquantized ? without_quantization(cfg) : cfg;
  o->drafter_ = cfg.dspark_stages > 0 && static_cast<int>(o->model_->weights.dspark.size()) == cfg.dspark_stages;
  family::StateGeometryOptions go;
  go.max_rollback = options.max_rollback;
  go.dspark = o->drafter_;
  o->geo_ = family::make_state_geometry(o->cfg_, go);
  o->replay_ = family::replay_shape(o->cfg_, o->geo_.ring_capacity, o->drafter_);
  RopeParams plain{cfg.rope_dim, cfg.rope_theta, 0, cfg.rope_factor, cfg.beta_fast, cfg.beta_slow};
  RopeParams yarn{cfg.rope_dim, cfg.compress_rope_theta, cfg.original_seq_len, cfg.rope_factor, cfg.beta_fast, cfg.beta_slow};
  o->freqs_plain_ = rope_frequencies(plain);
  o->freqs_yarn_ = rope_frequencies(yarn);
  o->pool_ = std::make_unique<ThreadPool>(options.threads);
  return o;
}

Oracle::~Oracle() = default;

int32_t Oracle::open_stream() {
  std::lock_guard<std::mutex> lock(mu_);
  const int32_t id = next_id_++;
  streams_.emplace(id, new_stream_state(geo_));
  return id;
}

Status Oracle::close_stream(int32_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  if (streams_.erase(stream) == 0) return error(StatusCode::not_found, "no stream {}", stream);
  return ok_status();
}

StatusOr<int64_t> Oracle::length(int32_t stream) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end()) return error(StatusCode::not_found, "no stream {}", stream);
  return it->second.length;
}

Status Oracle::truncate(int32_t stream, int64_t length) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end()) return error(StatusCode::not_found, "no stream {}", stream);
  StreamState& s = it->second;
  if (length < 0 || length > s.length)
    return error(StatusCode::out_of_range, "stream {}: cannot truncate length {} to {}", stream, s.length, length);
  if (s.length - length > options_.max_rollback)
    return error(StatusCode::out_of_range, "stream {}: rollback of {} rows exceeds max_rollback {}", stream,
                 s.length - length, options_.max_rollback);
  truncate_state(geo_, s, length);
  return ok_status();
}

StatusOr<std::vector<uint8_t>> Oracle::snapshot(int32_t stream) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end()) return error(StatusCode::not_found, "no stream {}", stream);
  return serialize_state(geo_, it->second);
}

Status Oracle::restore(int32_t stream, const std::vector<uint8_t>& bytes) {
  DSV4_ASSIGN_OR_RETURN(StreamState s, deserialize_state(geo_, bytes));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end()) return error(StatusCode::not_found, "no stream {}", stream);
  it->second = std::move(s);
  return ok_status();
}

StatusOr<StateParts> Oracle::snapshot_parts(int32_t stream, int64_t from) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end()) return error(StatusCode::not_found, "no stream {}", stream);
  if (from < 0 || from > it->second.length)
    return error(StatusCode::invalid_argument, "stream {}: split snapshot from {} of {} rows", stream, from,
                 it->second.length);
  return split_state(geo_, it->second, from);
}

Status Oracle::restore_parts(int32_t stream, std::span<const uint8_t> bounded,
                             std::span<const std::vector<std::span<const uint8_t>>> tables) {
  DSV4_ASSIGN_OR_RETURN(StreamState s, join_state(geo_, bounded, tables));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end()) return error(StatusCode::not_found, "no stream {}", stream);
  it->second = std::move(s);
  return ok_status();
}

StatusOr<std::vector<PieceResult>> Oracle::forward(const std::vector<Piece>& pieces) {
  std::lock_guard<std::mutex> lock(mu_);
  if (options_.precision == Precision::ref64) return forward_impl<double>(pieces);
  return forward_impl<float>(pieces);
}

StatusOr<DraftResult> Oracle::draft(int32_t stream, int32_t next) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!drafter_) return error(StatusCode::unimplemented, "the model has no DSpark weights");
  auto it = streams_.find(stream);
  if (it == streams_.end()) return error(StatusCode::not_found, "no stream {}", stream);
  if (it->second.length == 0) return error(StatusCode::invalid_argument, "stream {} is empty", stream);
  if (next < 0 || next >= config().vocab) return error(StatusCode::invalid_argument, "token {} out of range", next);
  if (options_.precision == Precision::ref64) return draft_impl<double>(it->second, next);
  return draft_impl<float>(it->second, next);
}

template <typename Acc>
StatusOr<DraftResult> Oracle::draft_impl(StreamState& s, int32_t next) {
  return dspark_draft<Acc>(*pool_, *model_, base_, geo_, freqs_plain_, s, next);
}

namespace {

// The context of row space `s` of the call `call` (its pieces' suffixes, positions, pieces, call rows).
CallCtx space_ctx(const CallCtx& call, const engine::StepPlan& plan, const engine::RowSpace& s) {
  CallCtx c = call;
  c.pieces.clear();
  for (size_t i = 0; i < plan.pieces.size(); ++i) {
    const PieceCtx& p = call.pieces[i];
    c.pieces.push_back(PieceCtx{p.state, p.start + s.first[i], p.T - s.first[i], s.row0[i]});
  }
  c.rows = s.rows;
  c.pos = engine::space_positions(plan.pieces, s);
  const std::vector<int32_t> piece_of = engine::space_pieces(plan.pieces, s);
  c.piece_of.assign(piece_of.begin(), piece_of.end());
  c.call_row = engine::call_rows(plan.pieces, s);
  c.image.clear();
  for (int64_t r : c.call_row) c.image.push_back(call.image[r]);
  return c;
}

}  // namespace

template <typename Acc>
StatusOr<std::vector<PieceResult>> Oracle::forward_impl(const std::vector<Piece>& pieces) {
  const family::Model& M = *model_;
  const family::ModelWeights& W = M.weights;
  const family::ModelPlan& cfg = cfg_;
  const int C = cfg.hc_mult;
  const int64_t D = cfg.dim, V = cfg.vocab;
  // The step's plan checks every piece before any state is touched; with bounded replay it holds each
  // layer's rows (probes and reference call shapes see every row).
  auto length = [&](int32_t id) -> StatusOr<int64_t> {
    auto it = streams_.find(id);
    if (it == streams_.end()) return error(StatusCode::not_found, "no stream {}", id);
    return it->second.length;
  };
  const bool replay = options_.bounded_replay && !options_.layer_probe && !options_.op_probe &&
                      !options_.pre_round_probe && !options_.reference_shapes;
  engine::StepLimits limits{V, 0, 0};
  if (replay) limits.replay = &replay_;
  limits.dim = D;
  DSV4_ASSIGN_OR_RETURN(engine::StepPlan plan, engine::plan_step(pieces, length, limits));
  Published pub;
  CallCtx c;
  c.M = &M;
  c.cfg = &cfg;
  c.roles = &cfg_.layers;
  c.geo = &geo_;
  c.pool = pool_.get();
  c.freqs_plain = &freqs_plain_;
  c.freqs_yarn = &freqs_yarn_;
  c.reference_shapes = options_.reference_shapes;
  for (const engine::PiecePlan& p : plan.pieces)
    c.pieces.push_back(PieceCtx{&streams_.at(p.stream), p.start, p.rows, p.row0});
  c.pos = plan.pos;
  c.piece_of.assign(plan.piece_of.begin(), plan.piece_of.end());
  c.rows = plan.rows();
  c.call_row = engine::call_rows(plan.pieces, plan.all);
  const std::vector<int32_t>& ids = plan.ids;
  // Image positions (an image span's rows, delimiters included): MoE bias_vl, Engram gate 0 and DEAD in the history.
  c.image = plan.image.empty() ? std::vector<uint8_t>(c.rows, 0) : plan.image;
  pub.topk.assign(c.rows, {});
  pub.cand.assign(c.rows, {});
  c.pub = &pub;
  // The contexts of the bounded layers' output rows (layer bounded_from + k at k).
  std::vector<CallCtx> outs;
  if (plan.bounded_from >= 0)
    for (const engine::RowSpace& s : plan.layer_out) outs.push_back(space_ctx(c, plan, s));
  const int from = plan.bounded_from;
  auto out_ctx = [&](int l) -> CallCtx& { return from < 0 || l < from ? c : outs[l - from]; };
  auto in_ctx = [&](int l) -> CallCtx& { return from < 0 || l <= from ? c : outs[l - 1 - from]; };
  // 1. Engram history and hash rows for the whole call, before the embedding.
  std::vector<std::vector<int64_t>> engram_rows(cfg.engram_layers.size());
  for (const PieceCtx& pc : c.pieces)
    for (int64_t i = 0; i < pc.T; ++i) {
      const int32_t t = ids[pc.row0 + i];
      pc.state->history.push_back(c.image[pc.row0 + i] ? -1 : M.engram_token_map.empty() ? t : M.engram_token_map[t]);
    }
  if (!cfg.engram_layers.empty()) {
    const int64_t pad = M.engram_token_map[cfg.engram_pad_id];
    for (size_t e = 0; e < cfg.engram_layers.size(); ++e) {
      const int64_t R = M.engram.cols;
      engram_rows[e].resize(c.rows * R);
      for (int64_t r = 0; r < c.rows; ++r)
        family::engram_hash_rows(M.engram, M.engram.layers[e], c.pieces[c.piece_of[r]].state->history.data(), c.pos[r],
                                 pad, &engram_rows[e][r * R]);
    }
  }
  // 2. Embedding (or the given rows), C streams, pi = one-hot.
  std::vector<float> h;
  std::vector<std::vector<Acc>> pi;
  embed_rows<Acc>(cfg, W.embed, ids.data(), c.rows, h, pi);
  for (const engine::GivenRow& g : plan.given)  // given rows (an image span) replace the token's embedding
    for (int k = 0; k < C; ++k)
      for (int64_t i = 0; i < D; ++i) h[(g.row * C + k) * D + i] = bf16_to_f32(g.values[i]);
  const int n_taps = static_cast<int>(cfg.dspark_target_layers.size());
  layer_rows_.assign(cfg.n_layers, 0);
  CallCtx tap_ctx = space_ctx(c, plan, plan.taps);
  Vec taps(drafter_ ? tap_ctx.rows * n_taps * D : 0);
  // 3. Blocks: layer l reads h at in_ctx(l)'s rows and leaves it at out_ctx(l)'s.
  for (int l = 0; l < cfg.n_layers; ++l) {
    const family::LayerPlan& role = cfg_.layers[l];
    const family::LayerWeights& B = W.layers[l];
    CallCtx& in = in_ctx(l);
    CallCtx& out = out_ctx(l);
    BlockProbe probe;
    if (options_.op_probe)
      probe = [&](const char* op, const float* v, int64_t n) { options_.op_probe(l, op, std::vector<float>(v, v + n)); };
    PreRoundSink pre_round;
    const std::vector<int>& tapped = options_.pre_round_layers;
    if (options_.pre_round_probe && (tapped.empty() || std::find(tapped.begin(), tapped.end(), l) != tapped.end()))
      pre_round = [&](const char* name, int64_t n_rows, std::vector<double> v) {
        options_.pre_round_probe(l, name, n_rows, v);
      };
    in.pre_round = out.pre_round = pre_round ? &pre_round : nullptr;
    if (role.engram) {  // below every bounded layer's input (family::replay_shape): every row
      engram_apply<Acc>(*pool_, B, M.engram.cols, engram_rows[role.engram_index].data(), c.image.data(), c.rows, C, D,
                        cfg.norm_eps, cfg.act_block, h.data());
      if (probe) probe("engram", h.data(), c.rows * C * D);
    }
    if (role.dspark_tap_index >= 0 && drafter_) {
      const std::vector<int64_t> at = engine::rows_within(plan.pieces, plan.taps, plan.in_rows(l));
      for (int64_t t = 0; t < tap_ctx.rows; ++t)
        for (int64_t i = 0; i < D; ++i) {
          Acc s = 0;
          for (int k = 0; k < C; ++k) s += static_cast<Acc>(h[(at[t] * C + k) * D + i]);
          taps[(t * n_taps + role.dspark_tap_index) * D + i] = round_bf16(s / static_cast<Acc>(C));
        }
    }
    std::vector<int64_t> keep;
    if (plan.shrinks(l)) keep = engine::rows_within(plan.pieces, plan.out_rows(l), plan.in_rows(l));
    std::vector<int32_t> out_ids;
    for (int64_t r : out.call_row) out_ids.push_back(ids[r]);
    auto attn = [&](const float* x_in, const float* x_out, float* y) {
      attention_layer<Acc>(in, out, l, x_in, x_out, y);
    };
    block_forward_rows<Acc>(*pool_, cfg, B, M.plan.layers[l].num_experts_per_tok, in.rows,
                            plan.shrinks(l) ? &keep : nullptr, attn, out.image.data(), out_ids.data(), h, pi, probe,
                            pre_round ? &pre_round : nullptr);
    in.pre_round = out.pre_round = nullptr;
    layer_rows_[l] = static_cast<int64_t>(pi.size());
    if (options_.layer_probe) options_.layer_probe(l, h);
    if (probe && role.index_source) {
      // The rows this layer's indexer published, per call row ascending, -1 past the picks: [rows, index_topk].
      const int64_t k = cfg.index_topk;
      Vec sel(c.rows * k, -1.0f);
      for (int64_t r = 0; r < c.rows; ++r)
        for (size_t j = 0; j < pub.topk[r].size() && static_cast<int64_t>(j) < k; ++j)
          sel[r * k + static_cast<int64_t>(j)] = static_cast<float>(pub.topk[r][j]);
      probe("topk", sel.data(), c.rows * k);
    }
  }
  // 4. Logits of the requested rows (h holds the last layer's output rows).
  const engine::RowSpace& last = plan.out_rows(cfg.n_layers - 1);
  const Vec norm = floats(W.norm);
  std::optional<HcHead> hc_head;
  if (cfg.premix == family::HcPremix::own) hc_head = hc_head_of(W.hc_head_fn, W.hc_head_base, W.hc_head_scale);
  std::vector<PieceResult> out(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].logit_rows.empty()) continue;
    std::vector<int64_t> rows;
    for (int32_t r : pieces[i].logit_rows) rows.push_back(last.row0[i] + r - last.first[i]);
    std::vector<Acc> logits;
    Vec normed;
    head_logits<Acc>(*pool_, cfg, norm, W.head, h.data(), pi, rows, logits, nullptr, hc_head ? &*hc_head : nullptr,
                     options_.op_probe ? &normed : nullptr);
    if (options_.op_probe) options_.op_probe(cfg.n_layers, "final_norm", normed);
    out[i].logits.assign(logits.begin(), logits.end());
  }
  // 5. DSpark rings receive one row per main position (the last ring rows of each piece).
  if (drafter_) dspark_write_rings<Acc>(tap_ctx, taps);
  for (const PieceCtx& pc : c.pieces) pc.state->length += pc.T;
  return out;
}

}  // namespace dsv4::cpu
