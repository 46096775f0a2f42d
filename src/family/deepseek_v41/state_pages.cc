// The paged layout of a stream's device state (see state_pages.h).
#include "family/deepseek_v41/state_pages.h"

#include <algorithm>

namespace dsv4::family {

namespace {

int64_t aligned(int64_t n) { return (n + kStateAlign - 1) / kStateAlign * kStateAlign; }
bool power_of_two(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }
int32_t log2_of(int64_t n) {
  int32_t s = 0;
  while ((int64_t{1} << s) < n) ++s;
  return s;
}

}  // namespace

StatusOr<PageLayout> page_layout(const StateGeometry& g, int64_t page_positions) {
  PageLayout p;
  int64_t largest = 1;
  for (const LayerStateShape& l : g.layers) {
    if (!l.kv_source) continue;
    if (!power_of_two(l.ratio))
      return error(StatusCode::unimplemented, "paged state: layer {} compresses {} positions a row, not a power of two",
                   l.layer, l.ratio);
    largest = std::max<int64_t>(largest, l.ratio);
  }
  p.page_positions = page_positions > 0 ? page_positions : std::max(kDefaultPagePositions, largest);
  if (!power_of_two(p.page_positions) || p.page_positions % largest != 0)
    return error(StatusCode::invalid_argument,
                 "paged state: pages of {} positions (a power of two and a multiple of {} is needed)", p.page_positions,
                 largest);
  for (const RowTableShape& t : g.row_tables()) {
    if (t.layer < 0) continue;  // the token history stays on the host
    const bool index = !p.tables.empty() && p.tables.back().layer == t.layer;  // a layer's second table: index keys
    PagedTable pt{t.layer, index, t.positions_per_row, t.row_bytes, p.page_bytes,
                  log2_of(p.page_positions / t.positions_per_row)};
    p.tables.push_back(pt);
    p.page_bytes += aligned(pt.rows_per_page() * t.row_bytes);
  }
  p.table_pages = p.pages_for(g.max_context);
  int64_t slab = g.dspark_stages * aligned(g.dspark_ring.bytes());
  for (const LayerStateShape& l : g.layers) {
    slab += aligned(l.window.bytes());
    for (const RingShape* r : {&l.proj_kv, &l.proj_gate, &l.idx_proj_kv, &l.idx_proj_gate}) slab += aligned(r->bytes());
  }
  p.slab_bytes = slab + aligned(p.table_pages * static_cast<int64_t>(sizeof(void*)));
  return p;
}

}  // namespace dsv4::family
