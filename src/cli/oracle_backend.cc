// The CPU oracle as a lane-core Backend (see oracle_backend.h).
#include "cli/oracle_backend.h"

#include <fmt/format.h>

namespace dsv4::cli {

OracleBackend::OracleBackend(std::unique_ptr<cpu::Oracle> oracle, OracleBackendOptions options)
    : oracle_(std::move(oracle)) {
  info_.model_id = options.model_id;
  info_.snapshot_version = 1;
  info_.vocab_size = static_cast<int32_t>(oracle_->config().vocab);
  info_.eos_ids = options.eos_ids;
  info_.max_context = options.max_context;
  info_.max_streams = options.max_streams;
  info_.memory_budget_bytes = options.max_context * options.max_streams;  // stream_bytes = rows
  info_.max_draft_depth = 0;
  info_.max_verify_rows = 64;  // within the oracle's rollback reach (128)
  info_.max_prefill_rows = 512;
  info_.window_cost = {1.0};
}

StatusOr<OracleBackend::Open*> OracleBackend::find(lanes::StreamId stream) {
  auto it = streams_.find(stream);
  if (it == streams_.end()) return error(StatusCode::not_found, "stream {} is not open", stream);
  return &it->second;
}

Status OracleBackend::open(lanes::StreamId stream, const lanes::StreamSpec& spec) {
  if (streams_.count(stream)) return error(StatusCode::internal, "stream {} is already open", stream);
  streams_[stream] = Open{oracle_->open_stream(), spec};
  return ok_status();
}

Status OracleBackend::prefill(std::span<const lanes::Piece> pieces) {
  std::vector<cpu::Piece> in;
  for (const auto& p : pieces) {
    DSV4_ASSIGN_OR_RETURN(Open * s, find(p.stream));
    in.push_back({s->oracle_stream, std::vector<int32_t>(p.tokens.begin(), p.tokens.end()), {}});
  }
  auto r = oracle_->forward(in);
  return r.ok() ? ok_status() : r.status();
}

Status OracleBackend::verify(std::span<const lanes::Window> windows,
                             std::vector<std::vector<lanes::RowResult>>* out) {
  std::vector<cpu::Piece> in;
  std::vector<const Open*> open;
  for (const auto& w : windows) {
    DSV4_ASSIGN_OR_RETURN(Open * s, find(w.stream));
    cpu::Piece p{s->oracle_stream, w.tokens, {}};
    for (int32_t i = 0; i < static_cast<int32_t>(w.tokens.size()); ++i) p.logit_rows.push_back(i);
    in.push_back(std::move(p));
    open.push_back(s);
  }
  DSV4_ASSIGN_OR_RETURN(std::vector<cpu::PieceResult> res, oracle_->forward(in));
  const size_t vocab = static_cast<size_t>(info_.vocab_size);
  out->assign(windows.size(), {});
  for (size_t w = 0; w < windows.size(); ++w) {
    const lanes::Window& win = windows[w];
    for (size_t i = 0; i < win.tokens.size(); ++i) {
      std::span<const float> row(res[w].logits.data() + i * vocab, vocab);
      lanes::RowResult r;
      r.token = lanes::sample_keyed(row, open[w]->spec.sampling, open[w]->spec.seed,
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

Status OracleBackend::keep(lanes::StreamId stream, int64_t rows) {
  DSV4_ASSIGN_OR_RETURN(Open * s, find(stream));
  return oracle_->truncate(s->oracle_stream, rows);
}

Status OracleBackend::draft(std::span<const lanes::DraftRequest>, std::vector<lanes::DraftProposal>*) {
  return error(StatusCode::unimplemented, "the oracle backend does not draft");
}

StatusOr<std::vector<uint8_t>> OracleBackend::snapshot(lanes::StreamId stream) {
  DSV4_ASSIGN_OR_RETURN(Open * s, find(stream));
  return oracle_->snapshot(s->oracle_stream);
}

Status OracleBackend::restore(lanes::StreamId stream, std::span<const uint8_t> bytes, int64_t rows) {
  DSV4_ASSIGN_OR_RETURN(Open * s, find(stream));
  Status st = oracle_->restore(s->oracle_stream, std::vector<uint8_t>(bytes.begin(), bytes.end()));
  if (st.ok()) {
    auto len = oracle_->length(s->oracle_stream);
    if (len.ok() && *len == rows) return st;
    st = error(StatusCode::data_loss, "snapshot holds {} rows, expected {}", len.ok() ? *len : -1, rows);
  }
  // A failed restore leaves the stream empty and usable: reopen it.
  (void)oracle_->close_stream(s->oracle_stream);
  s->oracle_stream = oracle_->open_stream();
  return st;
}

void OracleBackend::release(lanes::StreamId stream) {
  auto it = streams_.find(stream);
  if (it == streams_.end()) return;
  (void)oracle_->close_stream(it->second.oracle_stream);
  streams_.erase(it);
}

}  // namespace dsv4::cli
