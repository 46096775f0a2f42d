// How a stream's device state is cut for a shared pool (docs/kv-pool.md): a fixed slab per stream (every ring and the
// stream's page table) and pages of its append-only row tables, one page per `page_positions` positions.
//
// A page holds, for its positions [k·P, (k+1)·P), the rows of every compressed and index-key table of the stream
// (P / ratio rows of each, the tables in row_tables() order, each part 256-byte aligned). Row j of a table of ratio r
// is then at pages[j >> shift] + offset + (j & (2^shift − 1)) · row_bytes with shift = log2(P / r): one page-table
// read per row, and a stream's pages come and go one at a time, for every table at once.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "family/deepseek_v41/state_geometry.h"

namespace dsv4::family {

// One table's place inside every page.
struct PagedTable {
  int32_t layer = 0;         // the KV-source layer
  bool index_keys = false;   // its index-key rows (else its compressed rows)
  int32_t ratio = 1;         // positions per row
  int64_t row_bytes = 0;
  int64_t offset = 0;        // first byte inside a page
  int32_t shift = 0;         // log2 of rows per page (page_positions / ratio)
  int64_t rows_per_page() const { return int64_t{1} << shift; }
};

struct PageLayout {
  int64_t page_positions = 0;  // positions one page covers: a power of two, a multiple of every ratio
  int64_t page_bytes = 0;      // every table's rows of one page, each part aligned
  std::vector<PagedTable> tables;  // row_tables() without the token history, in that order
  int64_t table_pages = 0;     // page-table entries a stream may need: pages_for(max_context)
  int64_t slab_bytes = 0;      // a stream's fixed part: every ring (each part aligned) and its page table
  int64_t pages_for(int64_t positions) const {
    return page_bytes == 0 ? 0 : (positions + page_positions - 1) / page_positions;
  }
  // Device bytes of a stream holding `positions` positions: its slab and its pages.
  int64_t stream_bytes(int64_t positions) const { return slab_bytes + pages_for(positions) * page_bytes; }
};

constexpr int64_t kDefaultPagePositions = 256;
constexpr int64_t kStateAlign = 256;  // every part of a slab or a page starts at a multiple of it

// The layout of g's device state with pages of `page_positions` positions (0: kDefaultPagePositions raised to the
// largest ratio). Refuses a page size that is not a power of two or not a multiple of a table's ratio, and ratios that
// are not powers of two.
StatusOr<PageLayout> page_layout(const StateGeometry& g, int64_t page_positions = 0);

}  // namespace dsv4::family
