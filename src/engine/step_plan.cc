// The plan of one forward step (see step_plan.h).
#include "engine/step_plan.h"

#include <algorithm>
#include <set>

namespace dsv4::engine {

int64_t StepPlan::count(PieceKind k) const {
  int64_t n = 0;
  for (const PiecePlan& p : pieces) n += p.kind == k ? 1 : 0;
  return n;
}

namespace {

PieceKind kind_of(const Piece& p) {
  const size_t n = p.tokens.size();
  if (n == 1 && p.logit_rows.size() == 1) return PieceKind::decode;
  if (n > 1 && p.logit_rows.size() == n) return PieceKind::verify;
  return PieceKind::prompt;
}

}  // namespace

StatusOr<StepPlan> plan_step(const std::vector<Piece>& pieces, const std::function<StatusOr<int64_t>(int32_t)>& length,
                             const StepLimits& limits) {
  StepPlan plan;
  std::set<int32_t> seen;
  std::vector<std::pair<int64_t, int64_t>> image_rows;  // (first call row, count) of image positions
  int64_t rows = 0;
  for (const Piece& pc : pieces) {
    DSV4_ASSIGN_OR_RETURN(const int64_t have, length(pc.stream));
    if (!seen.insert(pc.stream).second)
      return error(StatusCode::invalid_argument, "stream {} appears twice in one call", pc.stream);
    for (int32_t t : pc.tokens)
      if (t < 0 || t >= limits.vocab)
        return error(StatusCode::invalid_argument, "token {} outside vocab {}", t, limits.vocab);
    for (int32_t r : pc.logit_rows)
      if (r < 0 || r >= static_cast<int32_t>(pc.tokens.size()))
        return error(StatusCode::invalid_argument, "logit row {} outside a piece of {} tokens", r, pc.tokens.size());
    if (!pc.draws.empty() && pc.draws.size() != pc.logit_rows.size())
      return error(StatusCode::invalid_argument, "stream {}: {} row draws for {} logit rows", pc.stream, pc.draws.size(),
                   pc.logit_rows.size());
    const int64_t n = static_cast<int64_t>(pc.tokens.size());
    if (limits.max_context > 0 && have + n > limits.max_context)
      return error(StatusCode::out_of_range, "stream {}: {} + {} rows exceed the context of {}", pc.stream, have, n,
                   limits.max_context);
    PiecePlan p{pc.stream, have, n, rows, plan.logit_rows(), kind_of(pc)};
    for (int64_t i = 0; i < n; ++i) {
      plan.ids.push_back(pc.tokens[i]);
      plan.pos.push_back(have + i);
      plan.piece_of.push_back(static_cast<int32_t>(plan.pieces.size()));
    }
    for (int32_t r : pc.logit_rows) plan.logit_index.push_back(rows + r);
    int64_t given_end = 0;
    for (const EmbedRows& e : pc.embeds) {
      if (limits.dim <= 0)
        return error(StatusCode::invalid_argument, "stream {}: this forward takes no given embedding rows", pc.stream);
      if (e.count < 1 || e.offset < given_end || e.offset + e.count > n)
        return error(StatusCode::invalid_argument,
                     "stream {}: given embedding rows [{}, {}) overlap or leave a piece of {} rows", pc.stream, e.offset,
                     e.offset + e.count, n);
      if (static_cast<int64_t>(e.values.size()) != e.count * limits.dim)
        return error(StatusCode::invalid_argument, "stream {}: {} given embedding rows hold {} values, not {} x {}",
                     pc.stream, e.count, e.values.size(), e.count, limits.dim);
      for (int64_t i = 0; i < e.count; ++i) plan.given.push_back(GivenRow{rows + e.offset + i, e.values.data() + i * limits.dim});
      if (e.image) image_rows.emplace_back(rows + e.offset, e.count);
      given_end = e.offset + e.count;
    }
    plan.pieces.push_back(p);
    rows += n;
  }
  if (!image_rows.empty()) {
    plan.image.assign(static_cast<size_t>(rows), 0);
    for (const auto& [first, count] : image_rows) std::fill_n(plan.image.begin() + first, count, uint8_t{1});
  }
  if (limits.max_call_rows > 0 && rows > limits.max_call_rows)
    return error(StatusCode::invalid_argument, "a call of {} rows exceeds max_call_rows {}", rows, limits.max_call_rows);
  plan.all = all_rows(plan.pieces);
  plan.taps = plan.all;
  const family::ReplayShape* shape = limits.replay;
  if (shape == nullptr) return plan;
  std::vector<int64_t> tap_first;
  for (const PiecePlan& p : plan.pieces) tap_first.push_back(family::tap_first_row(*shape, p.rows));
  plan.taps = row_space(plan.pieces, tap_first);
  if (!shape->bounded()) return plan;
  // Each piece's cone, from its first logit row; then one space per bounded layer.
  const size_t n_bounded = static_cast<size_t>(shape->n_layers - shape->from);
  std::vector<std::vector<int64_t>> first(n_bounded, std::vector<int64_t>(plan.pieces.size()));
  for (size_t i = 0; i < pieces.size(); ++i) {
    const PiecePlan& p = plan.pieces[i];
    int64_t first_logit = p.rows;
    for (int32_t r : pieces[i].logit_rows) first_logit = std::min<int64_t>(first_logit, r);
    const std::vector<int64_t> cone = family::cone_first_rows(*shape, p.rows, first_logit);
    for (size_t k = 0; k < n_bounded; ++k) first[k][i] = cone[k];
  }
  plan.bounded_from = shape->from;
  for (const std::vector<int64_t>& f : first) plan.layer_out.push_back(row_space(plan.pieces, f));
  return plan;
}

}  // namespace dsv4::engine
