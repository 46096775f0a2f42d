// Per-stream state of the oracle (model-spec.md §3.11) in the production packed row formats:
// window rings (FP8 rows), compressed KV and index-key rows of KV-source layers, the ratio-2
// compressor's fp32 projections of recent tokens, the Engram id history and DSpark rings.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "family/deepseek_v41/layer_plan.h"
#include "family/deepseek_v41/state_geometry.h"
#include "core/status.h"
#include "engine/stream_forward.h"

namespace dsv4::cpu {

struct LayerCache {
  // Ring of packed window rows [ring_capacity, kv_row_bytes(fp8, d)]: position q in slot q % cap.
  std::vector<uint8_t> window;
  // Gated-pooling KV source (V4.1 ratio 2, every V4 compressor): fp32 (or wider) compressor
  // projections k_t, g_t of recent positions, by slot q % comp_cap [comp_cap, comp_width]. A
  // group is pooled once all its positions exist. V4 ratio 4 also keeps its indexer's
  // compressor projections [comp_cap, 2 * ihd].
  std::vector<double> comp_kv, comp_gate, idx_comp_kv, idx_comp_gate;
  // KV source: compressed main KV rows [n_rows, kv_row_bytes(compressed_format, d)] and index-key
  // rows [n_rows, kv_row_bytes(fp4_ue8m0_32, ihd)]; row j stands for position j * ratio.
  std::vector<uint8_t> compressed, index_keys;
};

struct StreamState {
  int64_t length = 0;                 // tokens fed and accepted
  std::vector<int64_t> history;       // Engram compressed ids per position (-1 = DEAD)
  std::vector<LayerCache> layers;     // [n_layers]
  std::vector<std::vector<uint8_t>> dspark_rings;  // per stage [cap, kv_row_bytes(fp8, d)]
  int32_t last_index_publisher = -1;  // KV-source layer that last wrote index keys (reference shapes)
};

// Geometry shared by every stream of one model: the family's (state_geometry.h).
using StateGeometry = family::StateGeometry;

StreamState new_stream_state(const StateGeometry& g);
// Drops every row at or after `length` (window and projection rings keep older positions).
void truncate_state(const StateGeometry& g, StreamState& s, int64_t length);
// Whole-state bytes and back; restore refuses bytes of another geometry.
std::vector<uint8_t> serialize_state(const StateGeometry& g, const StreamState& s);
StatusOr<StreamState> deserialize_state(const StateGeometry& g, const std::vector<uint8_t>& bytes);

// Split snapshots (lanes::Backend::snapshot_parts) in the layout StateGeometry describes: the append-only row
// tables (row_tables()) and the bounded part (a header, then the ring slots window_slots and group_slots name),
// in the production row formats.
using engine::StateParts;  // engine/stream_forward.h
StateParts split_state(const StateGeometry& g, const StreamState& s, int64_t from);
std::vector<uint8_t> serialize_bounded(const StateGeometry& g, const StreamState& s);
StatusOr<StreamState> deserialize_bounded(const StateGeometry& g, std::span<const uint8_t> bytes);  // tables empty
// Rebuilds a state from its bounded part and each table's rows [0, n) as chunks (concatenated in order); refuses
// parts of another geometry or whose tables do not hold exactly the rows of the bounded part's length.
StatusOr<StreamState> join_state(const StateGeometry& g, std::span<const uint8_t> bounded,
                                 std::span<const std::vector<std::span<const uint8_t>>> tables);

}  // namespace dsv4::cpu
