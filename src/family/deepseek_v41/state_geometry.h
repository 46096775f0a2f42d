// Per-stream state sizes of the DeepSeek-V4 family: rings, row tables and their bytes (model-spec.md §3.11, §4, §8).
//
// One description for every backend (they allocate what it says; cpu/stream_state.cc and
// cuda/attention_state.cc still compute their own copy, and tests/ checks that all three agree):
// - every backbone layer: a window ring of packed rows, capacity = window + max_rollback (position q in
//   slot q % capacity, so a rollback of max_rollback rows still finds the window behind it);
// - every KV-source layer: its compressed rows and (where it owns them) index-key rows, one row per
//   `ratio` positions, append-only, max_context / ratio rows at most;
// - every pooling compressor (V4.1 ratio-2 sources, every V4 compressed layer): kv and gate projection
//   rings [capacity, width] of fp32 elements, capacity = max(window, span) + max_rollback where span is
//   the positions one pooled row reads (ratio; 2·ratio with V4's overlap), width d (2d with overlap);
//   V4 ratio-4 layers also their indexer's rings [capacity, 2·index_head_dim];
// - the token history: one int64 per position (Engram compressed ids on V4.1; both backends keep it for
//   every model, on the host), append-only;
// - the DSpark stages' window rings (as a backbone window ring), when the drafter runs.
#pragma once

#include <cstdint>
#include <vector>

#include "core/kv_rows.h"
#include "family/deepseek_v41/config.h"
#include "family/deepseek_v41/layer_plan.h"

namespace dsv4::family {

struct StateGeometryOptions {
  int64_t max_context = 65536;  // positions one stream may hold (sizes the row tables)
  int64_t max_rollback = 128;   // rows a stream can be truncated back by (sizes the rings)
  bool dspark = true;           // the drafter's window rings exist (when the plan runs one: dspark_stages > 0)
  bool compressed_fp8 = false;  // V4.1 compressed rows as FP8 (528 B) instead of the reference FP4 (288 B)
};

// A ring of `capacity` slots of `slot_bytes` each (window rows, or `width` projection elements).
struct RingShape {
  int64_t capacity = 0;
  int64_t width = 0;       // elements per slot: the row's dims (window) or projection width (fp32 rings)
  int64_t slot_bytes = 0;  // packed row bytes (window) or width * element bytes (projection rings)
  int64_t bytes() const { return capacity * slot_bytes; }
  bool present() const { return capacity > 0; }
  bool operator==(const RingShape&) const = default;
};

// An append-only table: one row of `row_bytes` per `positions_per_row` positions.
struct RowTableShape {
  int32_t layer = -1;            // -1: the token history
  int32_t positions_per_row = 1;
  int64_t row_bytes = 0;
  int64_t rows(int64_t positions) const { return positions / positions_per_row; }
  int64_t bytes(int64_t positions) const { return rows(positions) * row_bytes; }
};

struct LayerStateShape {
  int32_t layer = 0;
  int32_t ratio = 0;
  RingShape window;                 // packed rows [capacity, window_row]
  bool kv_source = false;
  bool index_keys = false;          // keeps index-key rows (V4.1 KV sources, V4 ratio-4 layers)
  bool overlap = false;             // the compressor pools two groups (V4 ratio 4)
  RingShape proj_kv, proj_gate;     // fp32 [capacity, width]; absent without a pooling compressor
  RingShape idx_proj_kv, idx_proj_gate;  // V4 ratio 4: the indexer compressor's [capacity, 2·ihd]
  bool operator==(const LayerStateShape&) const = default;
};

struct StateGeometry {
  Variant variant = Variant::v41;
  int64_t max_context = 0, max_rollback = 0;
  int64_t window = 0;               // sliding window (positions attention and the drafter read back)
  int64_t ring_capacity = 0;        // window + max_rollback
  int64_t d = 0, rope_dim = 0, index_head_dim = 0;
  KvRowFormat window_format = KvRowFormat::fp8_ue8m0_32;
  KvRowFormat compressed_format = KvRowFormat::fp4_e4m3_16;
  KvRowFormat index_format = KvRowFormat::fp4_ue8m0_32;
  int64_t window_row = 0, compressed_row = 0, index_row = 0;  // bytes per packed row
  int64_t projection_element_bytes = 4;  // fp32 (the CUDA backend; the CPU oracle holds doubles)
  std::vector<LayerStateShape> layers;   // backbone, index = layer id
  int32_t dspark_stages = 0;             // window rings of the drafter (0 when it does not run)
  RingShape dspark_ring;                 // each stage's [ring_capacity, window_row]

  // A snapshot of a stream (every backend's): its append-only row tables and a bounded part.
  // The append-only tables, in this order: the token history, then per KV-source layer in layer order
  // its compressed rows and, where it keeps them, its index-key rows.
  std::vector<RowTableShape> row_tables() const;
  // The bounded part holds only the ring slots a restored stream reads (it is never rolled back past its
  // restore point): of every window and DSpark ring the last window_slots positions; of each projection
  // ring (main and indexer) the current partial group's positions, with overlap the last complete group's
  // too (the next group pools it). Neither grows with rows nor with max_rollback.
  int64_t window_slots(int64_t length) const;
  int64_t group_slots(int32_t layer, int64_t length) const;
  // Bytes of the row tables holding `positions` positions; history_too = false leaves out the token
  // history (a host-side vector in the CUDA backend).
  int64_t row_table_bytes(int64_t positions, bool history_too = true) const;
  // Bytes of every ring (window, projection and DSpark rings): the part that does not grow with context.
  int64_t ring_bytes() const;
  // What one stream's device caches take at max_context: every ring and every compressed / index-key
  // table sized for max_context, each part rounded up to `align` bytes (the CUDA backend allocates
  // them in one block, parts aligned to 256 B); the token history is not on the device.
  int64_t device_bytes(int64_t align = 256) const;
  bool operator==(const StateGeometry&) const = default;
};

// The geometry of a validated config's plan (build_plan(c)).
StateGeometry make_state_geometry(const ModelPlan& plan, const StateGeometryOptions& o);

}  // namespace dsv4::family
