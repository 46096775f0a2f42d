// The CUDA forward's row draws: what a call asks of the device, and after the call the picks read back from the
// device and the whole rows viewed in place (see forward.h and kernels/sample/row_draws.cuh).
#include <algorithm>
#include <numeric>

#include "backends/cuda/forward/forward.h"
#include "backends/cuda/runtime/check.h"
#include "lanes/gumbel_candidates.h"
#include "lanes/partition_sum.h"

namespace dsv4::cuda {

CallDraws call_draws(const std::vector<engine::Piece>& pieces, int64_t vocab) {
  CallDraws c;
  std::vector<std::pair<const lanes::TokenMask*, int64_t>> mask_at;  // each mask's first word
  const size_t words = (static_cast<size_t>(vocab) + 63) / 64;
  bool reduced = false;
  for (const engine::Piece& pc : pieces) {
    for (size_t i = 0; i < pc.logit_rows.size(); ++i) {
      RowDrawDev d;
      if (!pc.draws.empty()) {
        const engine::RowDraw& r = pc.draws[i];
        d.kind = r.kind == engine::RowDraw::Kind::argmax      ? kDrawArgmax
                 : r.kind == engine::RowDraw::Kind::gumbel    ? kDrawGumbel
                 : r.kind == engine::RowDraw::Kind::truncated ? kDrawTruncated
                                                              : kDrawWhole;
        d.temperature = r.kind == engine::RowDraw::Kind::truncated ? r.cut.temperature : r.temperature;
        d.key = r.key;
        d.top_k = r.cut.top_k;
        d.top_p = r.cut.top_p;
        d.log_min_p = r.cut.log_min_p;
        d.partition = r.partition ? 1 : 0;
        d.top_n = r.top_n;
        d.proposed = r.proposed;
        if (r.mask != nullptr && d.kind != kDrawWhole) {
          auto it = std::find_if(mask_at.begin(), mask_at.end(), [&](const auto& m) { return m.first == r.mask; });
          if (it == mask_at.end()) {
            mask_at.emplace_back(r.mask, static_cast<int64_t>(c.masks.size()));
            c.masks.insert(c.masks.end(), r.mask->words(), r.mask->words() + words);
            it = mask_at.end() - 1;
          }
          d.mask = it->second;
        }
      }
      reduced = reduced || d.kind != kDrawWhole;
      c.draws.push_back(d);
    }
  }
  if (!reduced) c.draws.clear();
  return c;
}

Status Forward::collect_draws(const std::vector<engine::Piece>& pieces, std::span<const RowDrawDev> draws,
                              std::vector<engine::PieceResult>* out, std::vector<std::span<const float>>* rows) {
  const int64_t V = model_->config.vocab;
  const auto* got = static_cast<const RowPickDev*>(picks_host_.data());
  float* host = static_cast<float*>(logits_host_.data());
  out->resize(pieces.size());
  // Whole rows: those asked whole are in logits_host_ in order; a reduction that came back whole (a non-finite logit,
  // an uncertain cut, more candidates than a pick holds, a mask that allows no id) is copied after them.
  std::vector<int64_t> place(draws.size(), -1);  // each whole row's row in logits_host_
  int64_t asked = 0;
  for (size_t j = 0; j < draws.size(); ++j)
    if (draws[j].kind == kDrawWhole) place[j] = asked++;
  int64_t next = asked;
  size_t j = 0;
  for (size_t p = 0; p < pieces.size(); ++p) {
    engine::PieceResult& res = (*out)[p];
    res.logits.clear();
    res.picks.resize(pieces[p].logit_rows.size());
    for (engine::RowPick& pick : res.picks) {
      pick = engine::RowPick{};
      const RowDrawDev& d = draws[j];
      const RowPickDev& g = got[j];
      if (d.kind == kDrawArgmax && (g.token >= 0 || d.mask < 0)) {  // -1: a mask that allows no id (it goes whole)
        if (g.token < 0 || g.token >= V)
          return error(StatusCode::internal, "row draw {}: argmax {} outside the vocabulary", j, g.token);
        pick.whole = false;
        pick.token = g.token;
        pick.logits.assign(1, g.logits[0]);
      } else if ((d.kind == kDrawGumbel || d.kind == kDrawTruncated) && !g.irregular && !g.uncertain && g.count > 0 &&
                 g.count <= kDrawCandidates) {
        std::vector<int32_t> order(static_cast<size_t>(g.count));
        std::iota(order.begin(), order.end(), 0);
        std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return g.ids[a] < g.ids[b]; });
        pick.whole = false;
        for (int32_t k : order) {
          if (g.ids[k] < 0 || g.ids[k] >= V) return error(StatusCode::internal, "row draw {}: candidate {} outside the vocabulary", j, g.ids[k]);
          pick.ids.push_back(g.ids[k]);
          pick.logits.push_back(g.logits[k]);
        }
      } else if (d.kind != kDrawWhole) {
        place[j] = next;
        DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(host + next * V, logits_dev_ + static_cast<int64_t>(j) * V,
                                                         V * 4, cudaMemcpyDeviceToHost, stream_),
                                         "copying a logits row drawn whole"));
        ++next;
      }
      if (!pick.whole && d.partition) {
        pick.top_logit = g.top_logit;
        pick.sum = lanes::PartitionSum{g.sum_lo, g.sum_hi};
      }
      if (!pick.whole && d.top_n > 0) {
        if (g.top_count < 0 || g.top_count > kDrawTop)
          return error(StatusCode::internal, "row draw {}: {} best ids", j, g.top_count);
        for (int32_t k = 0; k < g.top_count; ++k) {
          if (g.top_ids[k] < 0 || g.top_ids[k] >= V)
            return error(StatusCode::internal, "row draw {}: best id {} outside the vocabulary", j, g.top_ids[k]);
          pick.top_ids.push_back(g.top_ids[k]);
          pick.top_logits.push_back(g.top_logits[k]);
        }
      }
      if (!pick.whole && d.proposed >= 0 && d.proposed < V) pick.proposed_logit = g.proposed_logit;
      ++j;
    }
  }
  // Views: in place when no reduction came back whole (the asked rows are in order); else assembled in order.
  const float* base = host;
  if (next > asked) {
    DSV4_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream_), "synchronizing the rows drawn whole"));
    assembled_.resize(static_cast<size_t>(next * V));
    int64_t at = 0;
    for (size_t k = 0; k < draws.size(); ++k) {
      if (place[k] < 0) continue;
      std::copy_n(host + place[k] * V, V, assembled_.data() + at * V);
      ++at;
    }
    base = assembled_.data();
  }
  rows->clear();
  j = 0;
  int64_t at = 0;
  for (size_t p = 0; p < pieces.size(); ++p) {
    int64_t n = 0;
    for (size_t i = 0; i < pieces[p].logit_rows.size(); ++i, ++j) n += place[j] >= 0;
    rows->emplace_back(n ? base + at * V : nullptr, static_cast<size_t>(n * V));
    at += n;
  }
  return ok_status();
}

}  // namespace dsv4::cuda
