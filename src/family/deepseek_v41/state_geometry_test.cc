// State geometry of the released configs against sizes computed by hand from model-spec.md §4.2, §4.4, §8.
#include "family/deepseek_v41/state_geometry.h"

#include <gtest/gtest.h>

#include "family/deepseek_v41/preset.h"

namespace dsv4::family {
namespace {

StateGeometry geometry(const Config& c, int64_t max_context, int64_t max_rollback, bool dspark) {
  StateGeometryOptions o;
  o.max_context = max_context;
  o.max_rollback = max_rollback;
  o.dspark = dspark;
  return make_state_geometry(build_plan(c), o);
}

// model-spec.md §4.4: compressed + index rows cost 3 x (288 + 68) / 2 + (288 + 68) = 890 B per token
// (FP4 main), 3 x (528 + 68) / 2 + (528 + 68) = 1,490 B with an FP8 main cache; window rings
// (40 + 3 DSpark) x 128 x 528 B.
TEST(StateGeometry, V41BytesPerTokenAsTheSpecSays) {
  const Config c = v41_flash_config();
  const StateGeometry g = geometry(c, 1 << 20, 0, true);
  EXPECT_EQ(g.window_row, 528);
  EXPECT_EQ(g.compressed_row, 288);
  EXPECT_EQ(g.index_row, 68);
  EXPECT_EQ(g.row_table_bytes(65536, false), 890 * 65536);
  EXPECT_EQ(g.row_table_bytes(65536, true), (890 + 8) * 65536);  // + one int64 history id per position
  int64_t windows = g.dspark_stages * g.dspark_ring.bytes();
  for (const LayerStateShape& l : g.layers) windows += l.window.bytes();
  EXPECT_EQ(windows, 43 * 128 * 528);
  StateGeometryOptions fp8;
  fp8.compressed_fp8 = true;
  EXPECT_EQ(make_state_geometry(build_plan(c), fp8).row_table_bytes(65536, false), 1490 * 65536);
}

// The tables in snapshot order: history, then layers 2, 8, 14 (ratio 2) and 20 (ratio 1), each with
// compressed and index-key rows.
TEST(StateGeometry, V41RowTables) {
  const StateGeometry g = geometry(v41_flash_config(), 4096, 128, true);
  const std::vector<RowTableShape> t = g.row_tables();
  ASSERT_EQ(t.size(), 9u);
  EXPECT_EQ(t[0].layer, -1);
  EXPECT_EQ(t[0].row_bytes, 8);
  const int32_t layers[] = {2, 2, 8, 8, 14, 14, 20, 20};
  for (size_t i = 1; i < t.size(); ++i) {
    EXPECT_EQ(t[i].layer, layers[i - 1]);
    EXPECT_EQ(t[i].positions_per_row, layers[i - 1] == 20 ? 1 : 2);
    EXPECT_EQ(t[i].row_bytes, i % 2 == 1 ? 288 : 68);
  }
}

// What the CUDA backend allocates per stream (cuda/attention_state.cc: each part rounded up to 256 B),
// V4.1-Flash at max_context 100,001 and max_rollback 128, by hand:
//   rings: capacity 128 + 128 = 256; window 256 x 528 = 135,168 (a multiple of 256) x 40 layers = 5,406,720;
//          DSpark 3 x 135,168 = 405,504; ratio-2 sources 2, 8, 14: kv + gate fp32 [256, 512] = 2 x 524,288
//          each, 3 x 1,048,576 = 3,145,728.
//   ratio-2 tables: 50,000 rows x 288 = 14,400,000 (a multiple of 256); x 68 = 3,400,000 -> 3,400,192;
//          3 x 17,800,192 = 53,400,576.
//   layer 20 (ratio 1): 100,001 x 288 = 28,800,288 -> 28,800,512; x 68 = 6,800,068 -> 6,800,128.
//   total 5,406,720 + 405,504 + 3,145,728 + 53,400,576 + 28,800,512 + 6,800,128 = 97,959,168.
TEST(StateGeometry, V41DeviceBytesByHand) {
  const StateGeometry g = geometry(v41_flash_config(), 100001, 128, true);
  EXPECT_EQ(g.ring_capacity, 256);
  EXPECT_EQ(g.device_bytes(), 97959168);
  EXPECT_EQ(g.ring_bytes(), 5406720 + 405504 + 3145728);
  // Without the drafter its three rings go.
  EXPECT_EQ(geometry(v41_flash_config(), 100001, 128, false).device_bytes(), 97959168 - 405504);
}

// V4-Flash-0731 (model-spec.md §8): 43 layers, ratios [0, 0, (4, 128) x 20, 4], MODEL1 rows of 584 B for window
// and compressed rows, index keys (68 B) on the 21 ratio-4 layers; at max_context 65,536, max_rollback 128:
//   windows 43 x 256 x 584 = 43 x 149,504 = 6,428,672;
//   ratio 4 (overlap): 16,384 x 584 = 9,568,256 rows, 16,384 x 68 = 1,114,112 index keys, projection rings
//          capacity max(128, 8) + 128 = 256 of width 1,024: 2 x 1,048,576, indexer rings [256, 256]: 2 x 262,144;
//          per layer 13,303,808, x 21 = 279,379,968;
//   ratio 128: 512 x 584 = 299,008 rows, rings [256, 512]: 2 x 524,288; per layer 1,347,584, x 20 = 26,951,680;
//   no DSpark rings (the 0731 drafter is not run).
//   total 312,760,320.
TEST(StateGeometry, V4DeviceBytesByHand) {
  const StateGeometry g = geometry(v4_flash_0731_config(), 65536, 128, false);
  EXPECT_EQ(g.window_row, 584);
  EXPECT_EQ(g.compressed_row, 584);
  EXPECT_EQ(g.device_bytes(), 312760320);
  const std::vector<RowTableShape> t = g.row_tables();
  EXPECT_EQ(t.size(), 1u + 21 * 2 + 20);
  const LayerStateShape& csa = g.layers[2];
  EXPECT_EQ(csa.proj_kv.capacity, 256);
  EXPECT_EQ(csa.proj_kv.width, 1024);
  EXPECT_EQ(csa.idx_proj_gate.width, 256);
  EXPECT_FALSE(g.layers[3].index_keys);
  EXPECT_FALSE(g.layers[3].idx_proj_kv.present());
}

// Window-only layers have a ring and nothing else; reuse and reindex layers read their source's tables.
TEST(StateGeometry, OnlySourcesHoldTables) {
  const StateGeometry g = geometry(v41_flash_config(), 4096, 16, true);
  for (const LayerStateShape& l : g.layers) {
    SCOPED_TRACE(l.layer);
    const bool source = l.layer == 2 || l.layer == 8 || l.layer == 14 || l.layer == 20;
    EXPECT_EQ(l.kv_source, source);
    EXPECT_EQ(l.index_keys, source);
    EXPECT_EQ(l.proj_kv.present(), source && l.layer != 20);
    EXPECT_EQ(l.window.capacity, 144);
  }
}

}  // namespace
}  // namespace dsv4::family
