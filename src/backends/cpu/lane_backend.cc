// CpuLaneBackend: the lane core's Backend on the CPU oracle (see lane_backend.h).
#include "backends/cpu/lane_backend.h"

#include <algorithm>

namespace dsv4::cpu {

StatusOr<std::unique_ptr<CpuLaneBackend>> CpuLaneBackend::create(std::shared_ptr<const ModelWeights> weights,
                                                                 const OracleOptions& oracle,
                                                                 const LaneBackendOptions& options) {
  if (oracle.reference_shapes)
    return error(StatusCode::invalid_argument, "the lane backend needs exact pieces; reference_shapes is off-contract");
  const ModelConfig cfg = weights->config;
  const bool has_draft = weights->dspark != nullptr;
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<Oracle> o, Oracle::create(std::move(weights), oracle));
  std::unique_ptr<CpuLaneBackend> b(new CpuLaneBackend());
  b->oracle_ = std::move(o);
  lanes::BackendInfo& i = b->info_;
  if (options.model_id.empty())
    return error(StatusCode::invalid_argument, "the lane backend needs a model id naming its weights");
  i.model_id = options.model_id;
  i.snapshot_version = 1;
  i.vocab_size = static_cast<int32_t>(cfg.vocab);
  i.eos_ids.assign(options.eos_ids.begin(), options.eos_ids.end());
  i.max_context = options.max_context;
  i.max_streams = options.max_streams;
  i.memory_budget_bytes = options.memory_budget_bytes;
  i.max_draft_depth = has_draft && options.drafts ? cfg.dspark_block : 0;
  i.max_verify_rows = std::max(2, options.max_verify_rows);
  i.max_prefill_rows = std::max(1, options.max_prefill_rows);
  // A fixed table (never a timing): a window of r rows costs about one step plus 10% per row.
  for (int r = 1; r <= i.max_verify_rows; ++r) i.window_cost.push_back(1.0 + 0.1 * (r - 1));
  // Bytes: rings are fixed per stream; compressed and index rows and the history grow per row.
  const StateGeometry g = make_geometry(cfg, oracle.max_rollback);
  const auto roles = layer_roles(cfg);
  b->bytes_fixed_ = (cfg.n_layers + (has_draft ? cfg.dspark_stages : 0)) * g.ring_capacity * g.window_row;
  double per_row = 8;  // Engram history
  for (const LayerRole& r : roles)
    if (r.kv_source) {
      per_row += static_cast<double>(g.compressed_row + g.index_row) / r.ratio;
      if (r.ratio > 1) b->bytes_fixed_ += 2 * g.ring_capacity * g.d * 8;
    }
  b->bytes_per_row_ = static_cast<int64_t>(per_row + 0.999);
  return b;
}

int64_t CpuLaneBackend::stream_bytes(int64_t rows) const { return bytes_fixed_ + rows * bytes_per_row_; }

StatusOr<CpuLaneBackend::Slot*> CpuLaneBackend::find(lanes::StreamId stream) {
  auto it = slots_.find(stream);
  if (it == slots_.end()) return error(StatusCode::not_found, "no open stream {}", stream);
  return &it->second;
}

Status CpuLaneBackend::open(lanes::StreamId stream, const lanes::StreamSpec& spec) {
  if (slots_.count(stream)) return error(StatusCode::invalid_argument, "stream {} is already open", stream);
  if (static_cast<int32_t>(slots_.size()) >= info_.max_streams)
    return error(StatusCode::resource_exhausted, "all {} stream slots are in use", info_.max_streams);
  slots_[stream] = Slot{oracle_->open_stream(), spec};
  return ok_status();
}

Status CpuLaneBackend::prefill(std::span<const lanes::Piece> pieces) {
  std::vector<Piece> call;
  for (const lanes::Piece& p : pieces) {
    DSV4_ASSIGN_OR_RETURN(Slot * s, find(p.stream));
    DSV4_ASSIGN_OR_RETURN(int64_t len, oracle_->length(s->oracle_stream));
    if (p.start != len)
      return error(StatusCode::invalid_argument, "stream {}: piece starts at {} but the stream holds {} rows",
                   p.stream, p.start, len);
    call.push_back(Piece{s->oracle_stream, {p.tokens.begin(), p.tokens.end()}, {}});
  }
  return oracle_->forward(call).status();
}

Status CpuLaneBackend::verify(std::span<const lanes::Window> windows,
                              std::vector<std::vector<lanes::RowResult>>* out) {
  std::vector<Piece> call;
  std::vector<Slot*> slots;
  for (const lanes::Window& w : windows) {
    DSV4_ASSIGN_OR_RETURN(Slot * s, find(w.stream));
    DSV4_ASSIGN_OR_RETURN(int64_t len, oracle_->length(s->oracle_stream));
    if (w.start != len || w.tokens.empty())
      return error(StatusCode::invalid_argument, "stream {}: window at {} with {} rows, the stream holds {} rows",
                   w.stream, w.start, w.tokens.size(), len);
    Piece p{s->oracle_stream, w.tokens, {}};
    for (size_t i = 0; i < w.tokens.size(); ++i) p.logit_rows.push_back(static_cast<int32_t>(i));
    call.push_back(std::move(p));
    slots.push_back(s);
  }
  DSV4_ASSIGN_OR_RETURN(std::vector<PieceResult> res, oracle_->forward(call));
  const int64_t V = info_.vocab_size;
  out->assign(windows.size(), {});
  for (size_t w = 0; w < windows.size(); ++w) {
    const lanes::Window& win = windows[w];
    for (size_t i = 0; i < win.tokens.size(); ++i) {
      std::span<const float> row(res[w].logits.data() + i * V, static_cast<size_t>(V));
      lanes::RowResult r;
      r.token = lanes::sample_keyed(row, slots[w]->spec.sampling, slots[w]->spec.seed,
                                    win.start + static_cast<int64_t>(i) + 1);
      if (win.logprobs) {
        r.logprob = lanes::token_logprob(row, r.token);
        if (i + 1 < win.tokens.size()) r.proposed_logprob = lanes::token_logprob(row, win.tokens[i + 1]);
      }
      if (win.top_logprobs > 0) r.top = lanes::top_logprobs(row, win.top_logprobs);
      (*out)[w].push_back(std::move(r));
    }
  }
  return ok_status();
}

Status CpuLaneBackend::keep(lanes::StreamId stream, int64_t rows) {
  DSV4_ASSIGN_OR_RETURN(Slot * s, find(stream));
  return oracle_->truncate(s->oracle_stream, rows);
}

Status CpuLaneBackend::draft(std::span<const lanes::DraftRequest> requests, std::vector<lanes::DraftProposal>* out) {
  out->assign(requests.size(), {});
  for (size_t i = 0; i < requests.size(); ++i) {
    const lanes::DraftRequest& q = requests[i];
    DSV4_ASSIGN_OR_RETURN(Slot * s, find(q.stream));
    DSV4_ASSIGN_OR_RETURN(int64_t len, oracle_->length(s->oracle_stream));
    if (q.position != len)
      return error(StatusCode::invalid_argument, "stream {}: draft anchor at {} but the stream holds {} rows",
                   q.stream, q.position, len);
    if (len == 0) continue;  // nothing fed yet: the drafter has no target rows; propose nothing
    DSV4_ASSIGN_OR_RETURN(DraftResult d, oracle_->draft(s->oracle_stream, q.anchor));
    const size_t n = std::min<size_t>(d.tokens.size(), static_cast<size_t>(std::max(q.depth, 0)));
    (*out)[i].tokens.assign(d.tokens.begin(), d.tokens.begin() + n);
    (*out)[i].probabilities.assign(d.probs.begin(), d.probs.begin() + n);
  }
  return ok_status();
}

StatusOr<std::vector<uint8_t>> CpuLaneBackend::snapshot(lanes::StreamId stream) {
  DSV4_ASSIGN_OR_RETURN(Slot * s, find(stream));
  return oracle_->snapshot(s->oracle_stream);
}

Status CpuLaneBackend::restore(lanes::StreamId stream, std::span<const uint8_t> bytes, int64_t rows) {
  DSV4_ASSIGN_OR_RETURN(Slot * s, find(stream));
  Status st = oracle_->restore(s->oracle_stream, std::vector<uint8_t>(bytes.begin(), bytes.end()));
  if (st.ok()) {
    DSV4_ASSIGN_OR_RETURN(int64_t len, oracle_->length(s->oracle_stream));
    if (len == rows) return ok_status();
    st = error(StatusCode::data_loss, "stream {}: snapshot holds {} rows, expected {}", stream, len, rows);
  }
  // Leave the stream empty and usable.
  (void)oracle_->close_stream(s->oracle_stream);
  s->oracle_stream = oracle_->open_stream();
  return st;
}

void CpuLaneBackend::release(lanes::StreamId stream) {
  auto it = slots_.find(stream);
  if (it == slots_.end()) return;
  (void)oracle_->close_stream(it->second.oracle_stream);
  slots_.erase(it);
}

}  // namespace dsv4::cpu
