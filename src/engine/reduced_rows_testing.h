// Tests only: a StreamForward that reduces logits rows on the host as a device sampler does (Piece::draws: argmax,
// the Gumbel candidates of lanes::gumbel_candidates and of lanes::truncated_candidates with a chosen logarithm and
// exponential, the logprob parts (largest logit, partition sum, best ids, a proposed id's logit), rows that come back
// whole), around any forward, so the lane adapter's reduced-row path is checked without a device.
#pragma once

#include <cmath>
#include <memory>
#include <vector>

#include "engine/stream_forward.h"
#include "lanes/gumbel_candidates.h"
#include "lanes/partition_sum.h"
#include "lanes/token_mask.h"
#include "lanes/truncated_candidates.h"

namespace dsv4::engine {

class HostReducedForward final : public StreamForward {
 public:
  struct Counts {
    int64_t argmax = 0, gumbel = 0, truncated = 0, masked = 0;  // rows reduced each way (masked argmax and Gumbel
                                                                  // rows apart)
    int64_t whole = 0;                                            // asked reductions that came back whole
  };
  // `log`, `exp`: the candidate rules' logarithm and exponential (null: std::log, std::exp); every `whole_every`-th
  // asked reduction (0: none) comes back whole, as a row with a non-finite logit or too many candidates does.
  HostReducedForward(std::unique_ptr<StreamForward> inner, double (*log)(double) = nullptr, int whole_every = 0,
                     double (*exp)(double) = nullptr)
      : inner_(std::move(inner)), log_(log), exp_(exp), whole_every_(whole_every) {}
  const Counts& counts() const { return counts_; }

  const family::ModelPlan& config() const override { return inner_->config(); }
  bool has_drafter() const override { return inner_->has_drafter(); }
  uint32_t snapshot_version() const override { return inner_->snapshot_version(); }
  int64_t embed_dim() const override { return inner_->embed_dim(); }
  StatusOr<int32_t> open_stream() override { return inner_->open_stream(); }
  Status close_stream(int32_t s) override { return inner_->close_stream(s); }
  StatusOr<int64_t> length(int32_t s) const override { return inner_->length(s); }
  Status truncate(int32_t s, int64_t n) override { return inner_->truncate(s, n); }
  StatusOr<std::vector<uint8_t>> snapshot(int32_t s) const override { return inner_->snapshot(s); }
  Status restore(int32_t s, const std::vector<uint8_t>& b) override { return inner_->restore(s, b); }
  StatusOr<DraftResult> draft(int32_t s, int32_t next) override { return inner_->draft(s, next); }
  std::vector<family::RowTableShape> row_tables() const override { return inner_->row_tables(); }
  StatusOr<StateParts> snapshot_parts(int32_t s, int64_t from) const override { return inner_->snapshot_parts(s, from); }
  Status restore_parts(int32_t s, std::span<const uint8_t> bounded,
                       std::span<const std::vector<std::span<const uint8_t>>> tables) override {
    return inner_->restore_parts(s, bounded, tables);
  }

  StatusOr<std::vector<PieceResult>> forward(const std::vector<Piece>& pieces) override {
    DSV4_ASSIGN_OR_RETURN(std::vector<PieceResult> out, inner_->forward(pieces));
    const size_t V = static_cast<size_t>(config().vocab);
    for (size_t p = 0; p < pieces.size() && p < out.size(); ++p) {
      const std::vector<RowDraw>& draws = pieces[p].draws;
      if (draws.empty()) continue;
      std::vector<float> all = std::move(out[p].logits), kept;
      std::vector<RowPick>& picks = out[p].picks;
      picks.assign(draws.size(), RowPick{});
      for (size_t i = 0; i < draws.size(); ++i) {
        const std::span<const float> row(all.data() + i * V, V);
        RowPick& pick = picks[i];
        const RowDraw& d = draws[i];
        if (d.kind != RowDraw::Kind::whole && whole_every_ > 0 && ++asked_ % whole_every_ == 0) {
          ++counts_.whole;
        } else if (d.kind != RowDraw::Kind::whole && d.mask != nullptr) {
          reduce_masked(row, d, &pick);
        } else if (d.kind == RowDraw::Kind::argmax) {
          pick.whole = false;
          pick.token = 0;
          for (size_t v = 1; v < V; ++v) {
            if (value(row[v]) > value(row[static_cast<size_t>(pick.token)])) pick.token = static_cast<int32_t>(v);
          }
          pick.logits.assign(1, row[static_cast<size_t>(pick.token)]);
          ++counts_.argmax;
        } else if (d.kind == RowDraw::Kind::gumbel &&
                   lanes::gumbel_candidates(row, d.temperature, d.key, lanes::kMaxGumbelCandidates, &pick.ids, log_) ==
                       lanes::CandidateVerdict::ok) {
          pick.whole = false;
          for (int32_t id : pick.ids) pick.logits.push_back(row[static_cast<size_t>(id)]);
          ++counts_.gumbel;
        } else if (d.kind == RowDraw::Kind::gumbel) {
          ++counts_.whole;
        } else if (d.kind == RowDraw::Kind::truncated) {
          reduce_truncated(row, d, &pick);
        }
        if (!pick.whole) logprob_parts(row, draws[i], &pick);
        if (pick.whole) kept.insert(kept.end(), row.begin(), row.end());
      }
      out[p].logits = std::move(kept);
    }
    return out;
  }

 private:
  static double value(float x) { return std::isnan(x) ? -INFINITY : static_cast<double>(x); }
  void reduce_truncated(std::span<const float> row, const RowDraw& d, RowPick* pick) {
    if (lanes::truncated_candidates(row, d.cut, d.key, lanes::kMaxGumbelCandidates, &pick->ids, exp_, log_) !=
        lanes::TruncatedVerdict::ok) {
      ++counts_.whole;
      return;
    }
    pick->whole = false;
    for (int32_t id : pick->ids) pick->logits.push_back(row[static_cast<size_t>(id)]);
    ++counts_.truncated;
  }
  // A masked row as a device reduces it: argmax and Gumbel rows over the allowed ids (the Gumbel candidates here are
  // every allowed id: a superset holding the winner), truncated rows over the row with the other logits at -inf.
  void reduce_masked(std::span<const float> row, const RowDraw& d, RowPick* pick) {
    const lanes::TokenMask& m = *d.mask;
    if (d.kind == RowDraw::Kind::truncated) {
      std::vector<float> masked(row.size(), -INFINITY);
      for (size_t v = 0; v < row.size(); ++v)
        if (m.contains(static_cast<int32_t>(v))) masked[v] = row[v];
      reduce_truncated(masked, d, pick);
      return;
    }
    int32_t best = -1;
    bool finite = true;
    for (size_t v = 0; v < row.size(); ++v) {
      if (!m.contains(static_cast<int32_t>(v))) continue;
      finite = finite && std::isfinite(row[v]);
      if (best < 0 || value(row[v]) > value(row[static_cast<size_t>(best)])) best = static_cast<int32_t>(v);
      pick->ids.push_back(static_cast<int32_t>(v));
      pick->logits.push_back(row[v]);
    }
    if (best < 0 || (d.kind == RowDraw::Kind::gumbel && !finite)) {  // no allowed id, or a non-finite one
      pick->ids.clear();
      pick->logits.clear();
      ++counts_.whole;
      return;
    }
    pick->whole = false;
    ++counts_.masked;
    if (d.kind == RowDraw::Kind::argmax) {
      pick->token = best;
      pick->ids.clear();
      pick->logits.assign(1, row[static_cast<size_t>(best)]);
    }
  }
  // What a device returns for a reduced row's logprobs (RowDraw::partition, top_n, proposed).
  static void logprob_parts(std::span<const float> row, const RowDraw& d, RowPick* pick) {
    if (d.partition && !row.empty()) {
      size_t a = 0;
      for (size_t v = 1; v < row.size(); ++v)
        if (value(row[v]) > value(row[a])) a = v;
      pick->top_logit = row[a];
      if (std::isfinite(value(row[a]))) pick->sum = lanes::partition_sum(row, value(row[a]));
    }
    if (d.top_n > 0) {
      for (const lanes::TokenLogprob& t : lanes::top_logprobs(row, d.top_n)) {
        pick->top_ids.push_back(t.token);
        pick->top_logits.push_back(row[static_cast<size_t>(t.token)]);
      }
    }
    if (d.proposed >= 0 && static_cast<size_t>(d.proposed) < row.size())
      pick->proposed_logit = row[static_cast<size_t>(d.proposed)];
  }
  std::unique_ptr<StreamForward> inner_;
  double (*log_)(double) = nullptr;
  double (*exp_)(double) = nullptr;
  int whole_every_ = 0;
  int64_t asked_ = 0;
  Counts counts_;
};

}  // namespace dsv4::engine
