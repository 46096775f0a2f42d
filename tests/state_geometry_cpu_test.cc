// The family's stream-state geometry against the CPU oracle's own (cpu::make_geometry) on every preset.
#include <gtest/gtest.h>

#include "backends/cpu/load.h"
#include "backends/cpu/stream_state.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/state_geometry.h"

namespace {

using namespace dsv4;
using namespace dsv4::family;

struct Case {
  Preset preset;
  Variant variant;
};
constexpr Case kCases[] = {{Preset::tiny, Variant::v41}, {Preset::small, Variant::v41}, {Preset::full, Variant::v41},
                           {Preset::tiny, Variant::v4},  {Preset::small, Variant::v4},  {Preset::full, Variant::v4}};

// The oracle runs no drafter on V4-0731 (cpu::model_config_from: its forward is unconfirmed, model-spec.md
// §10.7), so its geometry has no DSpark rings there.
StateGeometry family_geometry(const Config& c, int64_t rollback) {
  StateGeometryOptions o;
  o.max_rollback = rollback;
  o.dspark = c.variant == Variant::v41;
  return make_state_geometry(c, build_plan(c), o);
}

TEST(StateGeometryCpu, SameSizesAsTheOracle) {
  for (const Case& k : kCases) {
    for (int64_t rollback : {0, 7, 128}) {
      const Config c = preset_config(k.preset, k.variant);
      SCOPED_TRACE(std::string(preset_name(k.preset)) + " " + std::string(variant_name(k.variant)) + " rollback " +
                   std::to_string(rollback));
      const StateGeometry f = family_geometry(c, rollback);
      const cpu::StateGeometry o = cpu::make_geometry(cpu::model_config_from(c), rollback);
      EXPECT_EQ(f.ring_capacity, o.ring_capacity);
      EXPECT_EQ(f.window, o.window);
      EXPECT_EQ(f.d, o.d);
      EXPECT_EQ(f.window_row, o.window_row);
      EXPECT_EQ(f.compressed_row, o.compressed_row);
      EXPECT_EQ(f.index_row, o.index_row);
      EXPECT_EQ(f.dspark_stages, o.dspark_stages);
      ASSERT_EQ(f.layers.size(), o.ratio.size());
      for (size_t l = 0; l < f.layers.size(); ++l) {
        SCOPED_TRACE(l);
        const LayerStateShape& s = f.layers[l];
        EXPECT_EQ(s.ratio, o.ratio[l]);
        EXPECT_EQ(s.kv_source, o.kv_source[l]);
        EXPECT_EQ(s.index_keys, o.index_keys[l]);
        EXPECT_EQ(s.window.capacity, o.ring_capacity);
        EXPECT_EQ(s.proj_kv.capacity, o.comp_cap[l]);
        EXPECT_EQ(s.proj_kv.width, o.comp_width[l]);
        EXPECT_EQ(s.proj_gate.capacity, o.comp_cap[l]);
        EXPECT_EQ(s.idx_proj_kv.present(), static_cast<bool>(o.overlap[l]));
        if (o.overlap[l]) EXPECT_EQ(s.idx_proj_kv.width, o.idx_width);
      }
      const std::vector<RowTableShape> ft = f.row_tables();
      const std::vector<cpu::RowTableGeometry> ot = cpu::row_tables(o);
      ASSERT_EQ(ft.size(), ot.size());
      for (size_t t = 0; t < ft.size(); ++t) {
        EXPECT_EQ(ft[t].positions_per_row, ot[t].positions_per_row) << t;
        EXPECT_EQ(ft[t].row_bytes, ot[t].row_bytes) << t;
      }
    }
  }
}

// The oracle's allocations of a fresh stream: window and DSpark rings as bytes, projection rings as
// doubles (the family counts fp32 elements: same capacity and width, half the bytes of the oracle's).
TEST(StateGeometryCpu, FreshStreamHoldsTheRings) {
  for (const Case& k : kCases) {
    const Config c = preset_config(k.preset, k.variant);
    SCOPED_TRACE(std::string(preset_name(k.preset)) + " " + std::string(variant_name(k.variant)));
    const StateGeometry f = family_geometry(c, 16);
    const cpu::StateGeometry o = cpu::make_geometry(cpu::model_config_from(c), 16);
    const cpu::StreamState s = cpu::new_stream_state(o);
    int64_t window = 0, proj = 0, f_window = 0, f_proj = 0;
    for (size_t l = 0; l < s.layers.size(); ++l) {
      const cpu::LayerCache& lc = s.layers[l];
      window += static_cast<int64_t>(lc.window.size());
      proj += static_cast<int64_t>(lc.comp_kv.size() + lc.comp_gate.size() + lc.idx_comp_kv.size() +
                                   lc.idx_comp_gate.size());
      const LayerStateShape& fl = f.layers[l];
      f_window += fl.window.bytes();
      for (const RingShape* r : {&fl.proj_kv, &fl.proj_gate, &fl.idx_proj_kv, &fl.idx_proj_gate})
        f_proj += r->capacity * r->width;
    }
    for (const auto& r : s.dspark_rings) window += static_cast<int64_t>(r.size());
    f_window += f.dspark_stages * f.dspark_ring.bytes();
    EXPECT_EQ(window, f_window);
    EXPECT_EQ(proj, f_proj);
    EXPECT_EQ(f.ring_bytes(), f_window + 4 * f_proj);
  }
}

}  // namespace
