// Row spaces of a forward call (see row_space.h).
#include "engine/row_space.h"

#include <algorithm>

#include "engine/step_plan.h"

namespace dsv4::engine {

RowSpace row_space(const std::vector<PiecePlan>& pieces, const std::vector<int64_t>& first) {
  RowSpace s;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const int64_t f = std::clamp<int64_t>(i < first.size() ? first[i] : 0, 0, pieces[i].rows);
    s.first.push_back(f);
    s.row0.push_back(s.rows);
    s.rows += pieces[i].rows - f;
  }
  return s;
}

RowSpace all_rows(const std::vector<PiecePlan>& pieces) { return row_space(pieces, {}); }

std::vector<int64_t> call_rows(const std::vector<PiecePlan>& pieces, const RowSpace& s) {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(s.rows));
  for (size_t i = 0; i < pieces.size(); ++i)
    for (int64_t r = s.first[i]; r < pieces[i].rows; ++r) out.push_back(pieces[i].row0 + r);
  return out;
}

std::vector<int64_t> rows_within(const std::vector<PiecePlan>& pieces, const RowSpace& sub, const RowSpace& super) {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(sub.rows));
  for (size_t i = 0; i < pieces.size(); ++i)
    for (int64_t r = sub.first[i]; r < pieces[i].rows; ++r) out.push_back(super.row0[i] + r - super.first[i]);
  return out;
}

std::vector<int64_t> space_positions(const std::vector<PiecePlan>& pieces, const RowSpace& s) {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(s.rows));
  for (size_t i = 0; i < pieces.size(); ++i)
    for (int64_t r = s.first[i]; r < pieces[i].rows; ++r) out.push_back(pieces[i].start + r);
  return out;
}

std::vector<int32_t> space_pieces(const std::vector<PiecePlan>& pieces, const RowSpace& s) {
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(s.rows));
  for (size_t i = 0; i < pieces.size(); ++i)
    out.insert(out.end(), static_cast<size_t>(pieces[i].rows - s.first[i]), static_cast<int32_t>(i));
  return out;
}

}  // namespace dsv4::engine
