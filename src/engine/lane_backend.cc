// LaneBackend: the lane core's Backend over a StreamForward (see lane_backend.h).
#include "engine/lane_backend.h"

#include <algorithm>
#include <limits>

#include "core/kv_rows.h"
#include "lanes/gumbel_candidates.h"
#include "lanes/truncated_candidates.h"

namespace dsv4::engine {
namespace {

// Most top_logprobs a reduced row carries (the CUDA forward's kDrawTop; the API allows 20).
constexpr int32_t kMaxReducedTop = 20;

// The logit of a reduced row's drawn token: an argmax's own (under a mask it need not be the row's first best), else
// its candidate's.
float reduced_logit(const RowPick& pick, RowDraw::Kind kind, lanes::TokenId token) {
  if (kind == RowDraw::Kind::argmax) return pick.logits.size() == 1 ? pick.logits[0] : pick.top_logit;
  for (size_t k = 0; k < pick.ids.size(); ++k)
    if (pick.ids[k] == token) return pick.logits[k];
  return -std::numeric_limits<float>::infinity();  // unreachable: the drawn token is a candidate
}

}  // namespace

StatusOr<std::unique_ptr<LaneBackend>> LaneBackend::create(std::unique_ptr<StreamForward> forward,
                                                           int64_t max_rollback, const LaneBackendOptions& options) {
  if (!forward) return error(StatusCode::invalid_argument, "the lane backend needs a forward");
  const family::ModelPlan cfg = forward->config();
  const bool has_draft = forward->has_drafter();
  std::unique_ptr<LaneBackend> b(new LaneBackend());
  b->fwd_ = std::move(forward);
  lanes::BackendInfo& i = b->info_;
  if (options.model_id.empty())
    return error(StatusCode::invalid_argument, "the lane backend needs a model id naming its weights");
  i.model_id = options.model_id;
  i.snapshot_version = b->fwd_->snapshot_version();
  i.vocab_size = static_cast<int32_t>(cfg.vocab);
  i.eos_ids.assign(options.eos_ids.begin(), options.eos_ids.end());
  i.max_context = options.max_context;
  i.max_streams = options.max_streams;
  // A fixed device pool bounds the streams' bytes by what it holds.
  i.memory_budget_bytes = b->fwd_->pool_budget_bytes() > 0 ? b->fwd_->pool_budget_bytes() : options.memory_budget_bytes;
  i.max_draft_depth = has_draft && options.drafts ? cfg.dspark_block : 0;
  i.max_verify_rows = std::max(2, options.max_verify_rows);
  i.max_prefill_rows = std::max(1, options.max_prefill_rows);
  i.embed_dim = b->fwd_->embed_dim();
  // A fixed table (never a timing): a window of r rows costs about one step plus 10% per row.
  for (int r = 1; r <= i.max_verify_rows; ++r) i.window_cost.push_back(1.0 + 0.1 * (r - 1));
  // Bytes: rings are fixed per stream; compressed and index rows and the history grow per row.
  for (const family::RowTableShape& t : b->fwd_->row_tables())
    i.row_tables.push_back(lanes::RowTable{t.positions_per_row, t.row_bytes});
  const int64_t ring_capacity = cfg.window + max_rollback;
  const int64_t window_row = kv_row_bytes(cfg.window_format, cfg.head_dim, cfg.rope_dim);
  const int64_t compressed_row = kv_row_bytes(cfg.compressed_format, cfg.head_dim, cfg.rope_dim);
  const int64_t index_row = kv_row_bytes(cfg.index_format, cfg.index_head_dim, cfg.rope_dim);
  b->bytes_fixed_ = (cfg.n_layers + (has_draft ? cfg.dspark_stages : 0)) * ring_capacity * window_row;
  double per_row = 8;  // Engram history
  for (const family::LayerPlan& r : cfg.layers)
    if (r.kv_source) {
      per_row += static_cast<double>(compressed_row + index_row) / r.compress_ratio;
      if (r.compress_ratio > 1) b->bytes_fixed_ += 2 * ring_capacity * cfg.head_dim * 8;
    }
  b->bytes_per_row_ = static_cast<int64_t>(per_row + 0.999);
  b->reduce_rows_ = options.reduce_rows;
  if (options.draw_threads > 1) b->draw_pool_ = std::make_unique<ThreadPool>(options.draw_threads);
  return b;
}

int64_t LaneBackend::stream_bytes(int64_t rows) const {
  const int64_t pooled = fwd_->pooled_stream_bytes(rows);
  return pooled >= 0 ? pooled : bytes_fixed_ + rows * bytes_per_row_;
}

StatusOr<LaneBackend::Slot*> LaneBackend::find(lanes::StreamId stream) {
  auto it = slots_.find(stream);
  if (it == slots_.end()) return error(StatusCode::not_found, "no open stream {}", stream);
  return &it->second;
}

Status LaneBackend::open(lanes::StreamId stream, const lanes::StreamSpec& spec) {
  if (slots_.count(stream)) return error(StatusCode::invalid_argument, "stream {} is already open", stream);
  if (static_cast<int32_t>(slots_.size()) >= info_.max_streams)
    return error(StatusCode::resource_exhausted, "all {} stream slots are in use", info_.max_streams);
  DSV4_ASSIGN_OR_RETURN(int32_t id, fwd_->open_stream());
  slots_[stream] = Slot{id, spec};
  return ok_status();
}

Status LaneBackend::prefill(std::span<const lanes::Piece> pieces) {
  std::vector<std::vector<lanes::RowResult>> none;
  return step(pieces, {}, &none);
}

Status LaneBackend::verify(std::span<const lanes::Window> windows, std::vector<std::vector<lanes::RowResult>>* out) {
  return step({}, windows, out);
}

Status LaneBackend::step(std::span<const lanes::Piece> pieces, std::span<const lanes::Window> windows,
                         std::vector<std::vector<lanes::RowResult>>* out) {
  std::vector<Piece> call;
  for (const lanes::Piece& p : pieces) {
    DSV4_ASSIGN_OR_RETURN(Slot * s, find(p.stream));
    DSV4_ASSIGN_OR_RETURN(int64_t len, fwd_->length(s->fwd_stream));
    if (p.start != len)
      return error(StatusCode::invalid_argument, "stream {}: piece starts at {} but the stream holds {} rows",
                   p.stream, p.start, len);
    call.push_back(Piece{s->fwd_stream, {p.tokens.begin(), p.tokens.end()}, {}, p.embeds, {}});
  }
  std::vector<Slot*> slots;
  for (const lanes::Window& w : windows) {
    DSV4_ASSIGN_OR_RETURN(Slot * s, find(w.stream));
    DSV4_ASSIGN_OR_RETURN(int64_t len, fwd_->length(s->fwd_stream));
    if (w.start != len || w.tokens.empty())
      return error(StatusCode::invalid_argument, "stream {}: window at {} with {} rows, the stream holds {} rows",
                   w.stream, w.start, w.tokens.size(), len);
    Piece p{s->fwd_stream, w.tokens, {}, {}, {}};  // windows take tokens only
    for (size_t i = 0; i < w.tokens.size(); ++i) p.logit_rows.push_back(static_cast<int32_t>(i));
    bool reduced = false;
    for (size_t i = 0; i < w.tokens.size(); ++i) {
      p.draws.push_back(row_draw(w, i, *s));
      reduced = reduced || p.draws.back().kind != RowDraw::Kind::whole;
    }
    if (!reduced) p.draws.clear();  // every row whole
    call.push_back(std::move(p));
    slots.push_back(s);
  }
  out->assign(windows.size(), {});
  if (call.empty()) return ok_status();
  DSV4_RETURN_IF_ERROR(fwd_->forward_viewed(call, &results_, &rows_));
  if (results_.size() != call.size() || rows_.size() != call.size())
    return error(StatusCode::internal, "the forward returned {} results for {} pieces", results_.size(), call.size());
  const int64_t V = info_.vocab_size;
  // Reduced rows are decided here; whole rows (each drawn independently, so in any order) go to the draw threads.
  struct Whole {
    size_t w, i;
    std::span<const float> row;
  };
  std::vector<Whole> whole;
  for (size_t w = 0; w < windows.size(); ++w) {
    const lanes::Window& win = windows[w];
    const Piece& asked = call[pieces.size() + w];
    const PieceResult& res = results_[pieces.size() + w];
    const std::span<const float> rows = rows_[pieces.size() + w];
    const size_t n = win.tokens.size();
    if (!res.picks.empty() && res.picks.size() != n)
      return error(StatusCode::internal, "the forward returned {} picks for {} rows", res.picks.size(), n);
    (*out)[w].resize(n);
    size_t at = 0;  // whole rows so far
    for (size_t i = 0; i < n; ++i) {
      const RowPick* pick = res.picks.empty() ? nullptr : &res.picks[i];
      if (pick == nullptr || pick->whole) {
        if ((at + 1) * static_cast<size_t>(V) > rows.size())
          return error(StatusCode::internal, "the forward returned {} logits for window {}", rows.size(), w);
        whole.push_back({w, i, rows.subspan(at * V, static_cast<size_t>(V))});
        ++at;
        continue;
      }
      const RowDraw::Kind kind = asked.draws.empty() ? RowDraw::Kind::whole : asked.draws[i].kind;
      lanes::RowResult& r = (*out)[w][i];
      if (kind == RowDraw::Kind::argmax && pick->token >= 0 && pick->token < V) {
        r.token = pick->token;
      } else if ((kind == RowDraw::Kind::gumbel || kind == RowDraw::Kind::truncated) && !pick->ids.empty() &&
                 pick->ids.size() == pick->logits.size() &&
                 std::is_sorted(pick->ids.begin(), pick->ids.end()) && pick->ids.front() >= 0 && pick->ids.back() < V) {
        r.token = lanes::sample_gumbel_candidates(pick->ids, pick->logits, slots[w]->spec.sampling,
                                                  slots[w]->spec.seed, win.start + static_cast<int64_t>(i) + 1);
      } else {
        return error(StatusCode::internal, "the forward returned a malformed reduction of window {} row {}", w, i);
      }
      if (win.logprobs || win.top_logprobs > 0) {
        const lanes::LogPartition z = lanes::partition_from(pick->top_logit, pick->sum);
        if (win.logprobs) {
          r.logprob = lanes::logprob_of(reduced_logit(*pick, kind, r.token), z);
          if (i + 1 < n) {
            const lanes::TokenId next = win.tokens[i + 1];
            r.proposed_logprob = next >= 0 && next < V ? lanes::logprob_of(pick->proposed_logit, z)
                                                       : -std::numeric_limits<float>::infinity();
          }
        }
        if (win.top_logprobs > 0)
          r.top = lanes::top_logprobs_among(pick->top_ids, pick->top_logits, win.top_logprobs, z);
      }
    }
  }
  auto draw = [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const Whole& job = whole[static_cast<size_t>(k)];
      const lanes::Window& win = windows[job.w];
      const lanes::StreamSpec& spec = slots[job.w]->spec;
      lanes::RowResult& r = (*out)[job.w][job.i];
      r.token = lanes::draw_row(job.row, spec.sampling, spec.seed, win.start + static_cast<int64_t>(job.i) + 1,
                                win.mask(job.i));
      if (!win.logprobs && win.top_logprobs <= 0) continue;
      const lanes::LogPartition z = lanes::log_partition(job.row);  // once for the row's logprobs
      if (win.logprobs) {
        r.logprob = lanes::token_logprob(job.row, r.token, z);
        if (job.i + 1 < win.tokens.size()) r.proposed_logprob = lanes::token_logprob(job.row, win.tokens[job.i + 1], z);
      }
      if (win.top_logprobs > 0) r.top = lanes::top_logprobs(job.row, win.top_logprobs, z);
    }
  };
  if (draw_pool_ != nullptr && whole.size() > 1) {
    draw_pool_->parallel_for(static_cast<int64_t>(whole.size()), draw);
  } else {
    draw(0, static_cast<int64_t>(whole.size()));
  }
  return ok_status();
}

RowDraw LaneBackend::row_draw(const lanes::Window& w, size_t i, const Slot& s) const {
  RowDraw d;
  // top_logprobs beyond what a reduction carries read the whole row; so does a mask of another size than the
  // vocabulary (draw_masked then masks a copy). An empty mask draws from the whole row, as no mask does.
  const lanes::TokenMask* mask = w.mask(i);
  if (mask != nullptr && mask->empty()) mask = nullptr;
  if (!reduce_rows_ || w.top_logprobs > kMaxReducedTop || (mask != nullptr && mask->vocab_size() != info_.vocab_size))
    return d;
  const lanes::SamplingParams& p = s.spec.sampling;
  if (p.greedy()) {
    d.kind = RowDraw::Kind::argmax;
  } else if (lanes::plain_gumbel(p)) {
    d.kind = RowDraw::Kind::gumbel;
    d.temperature = lanes::keyed_temperature(p);
    d.key = lanes::row_key(s.spec.seed, w.start + static_cast<int64_t>(i) + 1);
  } else if (lanes::truncated_keyed(p)) {
    // Candidates of the truncated rule decide as sample_gumbel_candidates does (lanes/truncated_candidates.h).
    d.kind = RowDraw::Kind::truncated;
    d.cut = lanes::truncation_cut(p, info_.vocab_size);
    d.key = lanes::row_key(s.spec.seed, w.start + static_cast<int64_t>(i) + 1);
  }
  if (d.kind != RowDraw::Kind::whole) d.mask = mask;
  if (d.kind != RowDraw::Kind::whole && (w.logprobs || w.top_logprobs > 0)) {
    d.partition = true;
    d.top_n = w.top_logprobs;
    d.proposed = w.logprobs && i + 1 < w.tokens.size() ? w.tokens[i + 1] : -1;
  }
  return d;
}

Status LaneBackend::keep(lanes::StreamId stream, int64_t rows) {
  DSV4_ASSIGN_OR_RETURN(Slot * s, find(stream));
  return fwd_->truncate(s->fwd_stream, rows);
}

Status LaneBackend::draft(std::span<const lanes::DraftRequest> requests, std::vector<lanes::DraftProposal>* out) {
  out->assign(requests.size(), {});
  std::vector<DraftAsk> asks;
  std::vector<size_t> asked;  // the request of each ask
  for (size_t i = 0; i < requests.size(); ++i) {
    const lanes::DraftRequest& q = requests[i];
    DSV4_ASSIGN_OR_RETURN(Slot * s, find(q.stream));
    DSV4_ASSIGN_OR_RETURN(int64_t len, fwd_->length(s->fwd_stream));
    if (q.position != len)
      return error(StatusCode::invalid_argument, "stream {}: draft anchor at {} but the stream holds {} rows",
                   q.stream, q.position, len);
    if (len == 0) continue;  // nothing fed yet: the drafter has no target rows; propose nothing
    asks.push_back(DraftAsk{s->fwd_stream, q.anchor});
    asked.push_back(i);
  }
  if (asks.empty()) return ok_status();
  // Every stream's draft in one batch (one pass on the CUDA forward); each proposal as drafted alone.
  DSV4_ASSIGN_OR_RETURN(std::vector<DraftResult> drafts, fwd_->draft_batch(asks, false));
  if (drafts.size() != asks.size())
    return error(StatusCode::internal, "{} drafts for {} streams", drafts.size(), asks.size());
  for (size_t k = 0; k < asks.size(); ++k) {
    const lanes::DraftRequest& q = requests[asked[k]];
    const DraftResult& d = drafts[k];
    const size_t n = std::min<size_t>(d.tokens.size(), static_cast<size_t>(std::max(q.depth, 0)));
    (*out)[asked[k]].tokens.assign(d.tokens.begin(), d.tokens.begin() + n);
    (*out)[asked[k]].probabilities.assign(d.probs.begin(), d.probs.begin() + n);
  }
  return ok_status();
}

StatusOr<std::vector<uint8_t>> LaneBackend::snapshot(lanes::StreamId stream) {
  DSV4_ASSIGN_OR_RETURN(Slot * s, find(stream));
  return fwd_->snapshot(s->fwd_stream);
}

Status LaneBackend::restore(lanes::StreamId stream, std::span<const uint8_t> bytes, int64_t rows) {
  DSV4_ASSIGN_OR_RETURN(Slot * s, find(stream));
  return settle_restore(stream, s, fwd_->restore(s->fwd_stream, std::vector<uint8_t>(bytes.begin(), bytes.end())), rows);
}

Status LaneBackend::settle_restore(lanes::StreamId stream, Slot* s, Status st, int64_t rows) {
  if (st.ok()) {
    DSV4_ASSIGN_OR_RETURN(int64_t len, fwd_->length(s->fwd_stream));
    if (len == rows) return ok_status();
    st = error(StatusCode::data_loss, "stream {}: snapshot holds {} rows, expected {}", stream, len, rows);
  }
  // Leave the stream empty and usable.
  (void)fwd_->close_stream(s->fwd_stream);
  DSV4_ASSIGN_OR_RETURN(s->fwd_stream, fwd_->open_stream());
  return st;
}

StatusOr<lanes::SnapshotParts> LaneBackend::snapshot_parts(lanes::StreamId stream, int64_t from) {
  DSV4_ASSIGN_OR_RETURN(Slot * s, find(stream));
  DSV4_ASSIGN_OR_RETURN(StateParts parts, fwd_->snapshot_parts(s->fwd_stream, from));
  return lanes::SnapshotParts{std::move(parts.bounded), std::move(parts.rows)};
}

Status LaneBackend::restore_parts(lanes::StreamId stream, std::span<const uint8_t> bounded,
                                  std::span<const lanes::RowChunks> tables, int64_t rows) {
  DSV4_ASSIGN_OR_RETURN(Slot * s, find(stream));
  return settle_restore(stream, s, fwd_->restore_parts(s->fwd_stream, bounded, tables), rows);
}

void LaneBackend::release(lanes::StreamId stream) {
  auto it = slots_.find(stream);
  if (it == slots_.end()) return;
  (void)fwd_->close_stream(it->second.fwd_stream);
  slots_.erase(it);
}

}  // namespace dsv4::engine
