// Paged device state of the released configs: page and slab sizes by hand from model-spec.md §4.4 and the ring sizes
// state_geometry_test.cc derives; every row of every table at one place of one page.
#include "family/deepseek_v41/state_pages.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>

#include "family/deepseek_v41/preset.h"

namespace dsv4::family {
namespace {

StateGeometry geometry(const Config& c, int64_t max_context, int64_t max_rollback) {
  StateGeometryOptions o;
  o.max_context = max_context;
  o.max_rollback = max_rollback;
  return make_state_geometry(build_plan(c), o);
}

// V4.1-Flash, 256 positions a page: layers 2, 8, 14 (ratio 2) hold 128 rows of 288 B and of 68 B, layer 20 (ratio 1)
// 256 of each: 3 x (36,864 + 8,704) + 73,728 + 17,408 = 227,840 B = 890 B per position x 256 (every part is already a
// multiple of 256 B). The slab at max_context 100,001 and rollback 128: the rings of state_geometry_test.cc
// (5,406,720 + 405,504 + 3,145,728) and a page table of 391 pointers (3,128 B -> 3,328).
TEST(StatePages, V41PageAndSlabBytesByHand) {
  const StateGeometry g = geometry(v41_flash_config(), 100001, 128);
  const StatusOr<PageLayout> p = page_layout(g);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->page_positions, 256);
  EXPECT_EQ(p->page_bytes, 227840);
  EXPECT_EQ(p->page_bytes, 890 * 256);
  ASSERT_EQ(p->tables.size(), 8u);
  const int64_t offsets[] = {0, 36864, 45568, 82432, 91136, 128000, 136704, 210432};
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(p->tables[i].offset, offsets[i]) << i;
    EXPECT_EQ(p->tables[i].index_keys, i % 2 == 1) << i;
    EXPECT_EQ(p->tables[i].rows_per_page(), i < 6 ? 128 : 256) << i;
  }
  EXPECT_EQ(p->table_pages, 391);
  EXPECT_EQ(p->slab_bytes, 5406720 + 405504 + 3145728 + 3328);
  EXPECT_EQ(p->stream_bytes(0), p->slab_bytes);
  EXPECT_EQ(p->stream_bytes(1), p->slab_bytes + 227840);
  EXPECT_EQ(p->stream_bytes(512), p->slab_bytes + 2 * 227840);
  EXPECT_EQ(p->stream_bytes(513), p->slab_bytes + 3 * 227840);
}

// V4-Flash-0731: ratio-128 layers make the smallest page 128 positions (one HCA row), the default 256.
TEST(StatePages, V4PagesCoverTheLargestRatio) {
  const StateGeometry g = geometry(v4_flash_0731_config(), 65536, 128);
  const StatusOr<PageLayout> p = page_layout(g);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->page_positions, 256);
  bool hca = false;
  for (const PagedTable& t : p->tables) {
    EXPECT_EQ(t.rows_per_page() * t.ratio, 256);
    hca = hca || t.ratio == 128;
  }
  EXPECT_TRUE(hca);
  EXPECT_TRUE(page_layout(g, 128).ok());
  const StatusOr<PageLayout> small = page_layout(g, 64);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("multiple of 128"), std::string::npos) << small.status().message();
  EXPECT_FALSE(page_layout(g, 384).ok());  // not a power of two
}

// Every row of every table up to max_context lands at its own aligned place inside one page.
TEST(StatePages, RowsNeverShareBytes) {
  for (const Config& c : {v41_flash_config(), v4_flash_0731_config()})
    for (int64_t P : {int64_t{128}, int64_t{512}}) {
      const StateGeometry g = geometry(c, 3000, 16);
      const StatusOr<PageLayout> p = page_layout(g, P);
      ASSERT_TRUE(p.ok()) << p.status().message();
      std::set<std::pair<int64_t, int64_t>> spans;  // (page * page_bytes + first byte, last byte + 1)
      for (const PagedTable& t : p->tables) {
        EXPECT_EQ(t.offset % kStateAlign, 0);
        for (int64_t j = 0; j < g.max_context / t.ratio; ++j) {
          const int64_t page = j >> t.shift, at = t.offset + (j & (t.rows_per_page() - 1)) * t.row_bytes;
          ASSERT_LT(page, p->table_pages);
          ASSERT_LE(at + t.row_bytes, p->page_bytes);
          const int64_t b = page * p->page_bytes + at;
          auto next = spans.lower_bound({b, 0});
          if (next != spans.end()) ASSERT_GE(next->first, b + t.row_bytes);
          if (next != spans.begin()) ASSERT_LE(std::prev(next)->second, b);
          spans.insert({b, b + t.row_bytes});
        }
      }
    }
}

}  // namespace
}  // namespace dsv4::family
