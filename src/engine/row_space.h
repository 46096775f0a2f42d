// Row spaces of one forward call: per piece a suffix of its rows, laid out piece after piece in the call's
// order. The call's own rows are the space whose suffixes all start at 0; bounded replay (docs/replay.md)
// runs each decoder layer on a smaller one. Host bookkeeping only: which call row each space row is, where
// it sits in a larger space, its position and piece.
#pragma once

#include <cstdint>
#include <vector>

namespace dsv4::engine {

struct PiecePlan;  // step_plan.h

struct RowSpace {
  std::vector<int64_t> first;  // [pieces] the first piece row kept (the piece's row count: none)
  std::vector<int64_t> row0;   // [pieces] the space row of that first kept row
  int64_t rows = 0;
  bool operator==(const RowSpace&) const = default;
};

// The space keeping rows [first[i], pieces[i].rows) of every piece i (first clamped to the piece).
RowSpace row_space(const std::vector<PiecePlan>& pieces, const std::vector<int64_t>& first);

// Every row of the call.
RowSpace all_rows(const std::vector<PiecePlan>& pieces);

// The call row of each row of `s` [s.rows].
std::vector<int64_t> call_rows(const std::vector<PiecePlan>& pieces, const RowSpace& s);

// The row of `super` holding each row of `sub` [sub.rows]; every row of sub must be one of super's
// (sub.first[i] >= super.first[i]).
std::vector<int64_t> rows_within(const std::vector<PiecePlan>& pieces, const RowSpace& sub, const RowSpace& super);

// The absolute position and the piece index of each row of `s` [s.rows].
std::vector<int64_t> space_positions(const std::vector<PiecePlan>& pieces, const RowSpace& s);
std::vector<int32_t> space_pieces(const std::vector<PiecePlan>& pieces, const RowSpace& s);

}  // namespace dsv4::engine
