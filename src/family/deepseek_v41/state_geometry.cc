// Per-stream state geometry from the config and layer plan (see state_geometry.h).
#include "family/deepseek_v41/state_geometry.h"

#include <algorithm>

namespace dsv4::family {

namespace {

int64_t round_up(int64_t n, int64_t align) { return align <= 1 ? n : (n + align - 1) / align * align; }

RingShape ring(int64_t capacity, int64_t width, int64_t slot_bytes) { return RingShape{capacity, width, slot_bytes}; }

}  // namespace

StateGeometry make_state_geometry(const ModelPlan& plan, const StateGeometryOptions& o) {
  StateGeometry g;
  g.variant = plan.variant;
  g.max_context = o.max_context;
  g.max_rollback = o.max_rollback;
  g.window = plan.window;
  g.ring_capacity = g.window + o.max_rollback;
  g.d = plan.head_dim;
  g.rope_dim = plan.rope_dim;
  g.index_head_dim = plan.index_head_dim;
  g.window_format = plan.window_format;
  g.compressed_format = o.compressed_fp8 && plan.compressed_format == KvRowFormat::fp4_e4m3_16 ? KvRowFormat::fp8_ue8m0_32
                                                                                             : plan.compressed_format;
  g.index_format = plan.index_format;
  g.window_row = kv_row_bytes(g.window_format, g.d, g.rope_dim);
  g.compressed_row = kv_row_bytes(g.compressed_format, g.d, g.rope_dim);
  g.index_row = kv_row_bytes(g.index_format, g.index_head_dim, g.rope_dim);
  const int64_t pe = g.projection_element_bytes;
  for (const LayerPlan& p : plan.layers) {
    LayerStateShape s;
    s.layer = p.id;
    s.ratio = p.compress_ratio;
    s.window = ring(g.ring_capacity, g.d, g.window_row);
    s.kv_source = p.kv_source;
    s.index_keys = p.owns_index_keys;
    s.overlap = p.compressor_overlap;
    // A pooling compressor (ratio >= 2) waits for a whole group (two with overlap) of projections; after
    // a rollback of max_rollback rows the group being completed still finds them.
    if (p.kv_source && p.compress_ratio > 1) {
      const int64_t span = p.compressor_overlap ? 2 * p.compress_ratio : p.compress_ratio;
      const int64_t cap = std::max<int64_t>(g.window, span) + o.max_rollback;
      const int64_t width = (p.compressor_overlap ? 2 : 1) * g.d;
      s.proj_kv = s.proj_gate = ring(cap, width, width * pe);
      if (p.compressor_overlap) {
        const int64_t iw = 2 * g.index_head_dim;
        s.idx_proj_kv = s.idx_proj_gate = ring(cap, iw, iw * pe);
      }
    }
    g.layers.push_back(s);
  }
  g.dspark_stages = o.dspark ? plan.dspark_stages : 0;
  g.dspark_ring = ring(g.dspark_stages > 0 ? g.ring_capacity : 0, g.d, g.window_row);
  return g;
}

int64_t StateGeometry::window_slots(int64_t length) const { return std::min(length, window); }

int64_t StateGeometry::group_slots(int32_t layer, int64_t length) const {
  const LayerStateShape& l = layers[static_cast<size_t>(layer)];
  if (!l.proj_kv.present()) return 0;
  const int64_t r = l.ratio;
  return length - std::max<int64_t>(0, (length / r) * r - (l.overlap ? r : 0));
}

std::vector<RowTableShape> StateGeometry::row_tables() const {
  std::vector<RowTableShape> t = {{-1, 1, static_cast<int64_t>(sizeof(int64_t))}};
  for (const LayerStateShape& l : layers) {
    if (!l.kv_source) continue;
    t.push_back({l.layer, l.ratio, compressed_row});
    if (l.index_keys) t.push_back({l.layer, l.ratio, index_row});
  }
  return t;
}

int64_t StateGeometry::row_table_bytes(int64_t positions, bool history_too) const {
  int64_t total = 0;
  for (const RowTableShape& t : row_tables())
    if (t.layer >= 0 || history_too) total += t.bytes(positions);
  return total;
}

int64_t StateGeometry::ring_bytes() const {
  int64_t total = dspark_stages * dspark_ring.bytes();
  for (const LayerStateShape& l : layers)
    total += l.window.bytes() + l.proj_kv.bytes() + l.proj_gate.bytes() + l.idx_proj_kv.bytes() +
             l.idx_proj_gate.bytes();
  return total;
}

int64_t StateGeometry::device_bytes(int64_t align) const {
  int64_t total = dspark_stages * round_up(dspark_ring.bytes(), align);
  for (const LayerStateShape& l : layers) {
    total += round_up(l.window.bytes(), align);
    for (const RingShape* r : {&l.proj_kv, &l.proj_gate, &l.idx_proj_kv, &l.idx_proj_gate})
      total += round_up(r->bytes(), align);
  }
  for (const RowTableShape& t : row_tables())
    if (t.layer >= 0) total += round_up(t.bytes(max_context), align);
  return total;
}

}  // namespace dsv4::family
