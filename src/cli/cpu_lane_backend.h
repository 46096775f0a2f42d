// The CPU oracle as a lane-core Backend: prompt pieces, verify windows drawn with the keyed sampler, DSpark drafts.
//
// Wiring only (src/cli joins a backend to the lane core): the oracle computes logits; this adapter draws each
// verify row with lanes::sample_keyed at the row's absolute position, so every backend shares one rule.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/forward.h"
#include "lanes/backend.h"

namespace dsv4::cli {

struct CpuLaneOptions {
  std::string model_id;                 // identity for prompt-cache entries (e.g. "tiny-synthetic-seed-7")
  std::vector<lanes::TokenId> eos_ids;  // the model's end-of-sequence ids
  int64_t max_context = 1 << 16;
  int32_t max_streams = 8;
  int64_t bytes_per_row = 0;            // admission price per position; 0 = memory never limits admission
  int32_t max_verify_rows = 64;
  int32_t max_prefill_rows = 512;
  bool drafts = true;                   // offer the DSpark head (when the weights have one)
};

class CpuLaneBackend final : public lanes::Backend {
 public:
  // `has_dspark`: the weights carry the DSpark drafter.
  CpuLaneBackend(std::unique_ptr<cpu::Oracle> oracle, bool has_dspark, CpuLaneOptions options)
      : oracle_(std::move(oracle)), options_(std::move(options)) {
    const cpu::ModelConfig& c = oracle_->config();
    info_.model_id = options_.model_id;
    info_.snapshot_version = 1;
    info_.vocab_size = static_cast<int32_t>(c.vocab);
    info_.eos_ids = options_.eos_ids;
    info_.max_context = options_.max_context;
    info_.max_streams = options_.max_streams;
    info_.memory_budget_bytes = options_.bytes_per_row > 0 ? options_.bytes_per_row * options_.max_context *
                                                                 options_.max_streams
                                                           : INT64_MAX;
    info_.max_draft_depth = options_.drafts && has_dspark ? c.dspark_block : 0;
    info_.max_verify_rows = options_.max_verify_rows;
    info_.max_prefill_rows = options_.max_prefill_rows;
    // A CPU forward streams every weight once per call: a window of r rows costs about 1 + 0.15 (r - 1).
    for (int32_t r = 1; r <= options_.max_verify_rows; ++r) info_.window_cost.push_back(1.0 + 0.15 * (r - 1));
  }

  const lanes::BackendInfo& info() const override { return info_; }
  int64_t stream_bytes(int64_t rows) const override { return options_.bytes_per_row * rows; }

  Status open(lanes::StreamId stream, const lanes::StreamSpec& spec) override {
    streams_[stream] = Open{oracle_->open_stream(), spec};
    return ok_status();
  }

  Status prefill(std::span<const lanes::Piece> pieces) override {
    std::vector<cpu::Piece> batch;
    for (const lanes::Piece& p : pieces) {
      DSV4_ASSIGN_OR_RETURN(const Open* s, find(p.stream));
      batch.push_back(cpu::Piece{s->id, std::vector<int32_t>(p.tokens.begin(), p.tokens.end()), {}});
    }
    return oracle_->forward(batch).status();
  }

  Status verify(std::span<const lanes::Window> windows, std::vector<std::vector<lanes::RowResult>>* out) override {
    std::vector<cpu::Piece> batch;
    std::vector<const Open*> owners;
    for (const lanes::Window& w : windows) {
      DSV4_ASSIGN_OR_RETURN(const Open* s, find(w.stream));
      cpu::Piece piece{s->id, std::vector<int32_t>(w.tokens.begin(), w.tokens.end()), {}};
      for (int32_t i = 0; i < static_cast<int32_t>(w.tokens.size()); ++i) piece.logit_rows.push_back(i);
      batch.push_back(std::move(piece));
      owners.push_back(s);
    }
    DSV4_ASSIGN_OR_RETURN(std::vector<cpu::PieceResult> results, oracle_->forward(batch));
    const size_t vocab = static_cast<size_t>(info_.vocab_size);
    out->assign(windows.size(), {});
    for (size_t w = 0; w < windows.size(); ++w) {
      const lanes::Window& window = windows[w];
      for (size_t i = 0; i < window.tokens.size(); ++i) {
        std::span<const float> row(results[w].logits.data() + i * vocab, vocab);  // f32 [V]
        lanes::RowResult r;
        r.token = lanes::sample_keyed(row, owners[w]->spec.sampling, owners[w]->spec.seed,
                                      window.start + static_cast<int64_t>(i) + 1);
        if (window.logprobs) {
          r.logprob = lanes::token_logprob(row, r.token);
          if (i + 1 < window.tokens.size()) r.proposed_logprob = lanes::token_logprob(row, window.tokens[i + 1]);
        }
        r.top = lanes::top_logprobs(row, window.top_logprobs);
        (*out)[w].push_back(std::move(r));
      }
    }
    return ok_status();
  }

  Status keep(lanes::StreamId stream, int64_t rows) override {
    DSV4_ASSIGN_OR_RETURN(const Open* s, find(stream));
    return oracle_->truncate(s->id, rows);
  }

  Status draft(std::span<const lanes::DraftRequest> requests, std::vector<lanes::DraftProposal>* out) override {
    out->assign(requests.size(), {});
    for (size_t i = 0; i < requests.size(); ++i) {
      DSV4_ASSIGN_OR_RETURN(const Open* s, find(requests[i].stream));
      if (requests[i].position == 0) continue;  // the drafter reads the stream's rows: none yet
      DSV4_ASSIGN_OR_RETURN(cpu::DraftResult d, oracle_->draft(s->id, requests[i].anchor));
      const size_t n = std::min<size_t>(d.tokens.size(), static_cast<size_t>(requests[i].depth));
      (*out)[i].tokens.assign(d.tokens.begin(), d.tokens.begin() + static_cast<ptrdiff_t>(n));
      (*out)[i].probabilities.assign(d.probs.begin(), d.probs.begin() + static_cast<ptrdiff_t>(n));
    }
    return ok_status();
  }

  StatusOr<std::vector<uint8_t>> snapshot(lanes::StreamId stream) override {
    DSV4_ASSIGN_OR_RETURN(const Open* s, find(stream));
    return oracle_->snapshot(s->id);
  }

  Status restore(lanes::StreamId stream, std::span<const uint8_t> bytes, int64_t rows) override {
    DSV4_ASSIGN_OR_RETURN(const Open* s, find(stream));
    DSV4_RETURN_IF_ERROR(oracle_->restore(s->id, std::vector<uint8_t>(bytes.begin(), bytes.end())));
    DSV4_ASSIGN_OR_RETURN(int64_t length, oracle_->length(s->id));
    if (length != rows) {
      // Foreign bytes: start the stream over empty, as the contract asks.
      (void)oracle_->close_stream(s->id);
      streams_[stream].id = oracle_->open_stream();
      return error(StatusCode::data_loss, "snapshot holds {} rows, expected {}", length, rows);
    }
    return ok_status();
  }

  void release(lanes::StreamId stream) override {
    auto it = streams_.find(stream);
    if (it == streams_.end()) return;
    (void)oracle_->close_stream(it->second.id);
    streams_.erase(it);
  }

  cpu::Oracle& oracle() { return *oracle_; }

 private:
  struct Open {
    int32_t id = 0;  // the oracle's stream id
    lanes::StreamSpec spec;
  };
  StatusOr<const Open*> find(lanes::StreamId stream) const {
    auto it = streams_.find(stream);
    if (it == streams_.end()) return error(StatusCode::not_found, "cpu backend: stream {} is not open", stream);
    return &it->second;
  }

  std::unique_ptr<cpu::Oracle> oracle_;
  CpuLaneOptions options_;
  lanes::BackendInfo info_;
  std::map<lanes::StreamId, Open> streams_;
};

}  // namespace dsv4::cli
