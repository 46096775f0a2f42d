// Per-stream attention caches on the device (model-spec.md §3.11, §4.2), in the production packed
// row formats: per layer a window ring of FP8 rows (capacity = window + max rollback); per KV-source
// layer the compressed KV rows (288 B FP4 or 528 B FP8 at V4.1 sizes) and index-key rows (68 B),
// sized for a maximum context, and the ratio-2 compressor's fp32 projection rings; plus the DSpark
// stages' window rings. One device allocation per stream.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cpu/model_config.h"
#include "backends/cuda/device_buffer.h"
#include "core/status.h"

namespace dsv4::cuda {

// Shapes shared by every stream of one model (the device counterpart of cpu::StateGeometry).
struct AttnGeometry {
  int n_layers = 0, dspark_stages = 0;
  int64_t max_context = 0;    // positions a stream may hold
  int64_t max_rollback = 0;
  int64_t ring_capacity = 0;  // window + max_rollback: position q lives in slot q % capacity
  int64_t d = 0, ihd = 0;     // head dim (window / compressed rows), index head dim
  int64_t window_row = 0, compressed_row = 0, index_row = 0;  // bytes per packed row
  cpu::RowFormat compressed_format = cpu::RowFormat::fp4_e4m3_16;
  std::vector<int> ratio;       // per layer
  std::vector<uint8_t> kv_source;  // per layer
  // V4 / 0731 (model-spec.md §8): every ratio > 0 layer pools its own projections, [proj_cap,
  // proj_width] fp32 per ring (proj_width 2d at ratio 4, else d; proj_cap = max(window, span) +
  // max_rollback); ratio-4 layers also keep index keys and their indexer's [proj_cap, 2*ihd] rings.
  bool v4 = false;
  int64_t rope_dim = 0;
  std::vector<int64_t> proj_cap, proj_width;  // per layer (0: no V4 projection rings)
  std::vector<uint8_t> index_keys;            // per layer: keeps index-key rows
  std::vector<uint8_t> overlap;               // per layer: V4 ratio 4 (indexer rings)
  bool operator==(const AttnGeometry&) const = default;
};

StatusOr<AttnGeometry> make_attn_geometry(const cpu::ModelConfig& cfg, int64_t max_context,
                                          int64_t max_rollback);

// Device pointers of one layer's caches inside a stream's allocation (null where absent).
struct LayerCachesDev {
  uint8_t* window = nullptr;      // [ring_capacity, window_row]
  uint8_t* compressed = nullptr;  // KV source: [max_context / ratio, compressed_row]; row j = position j*ratio
  uint8_t* index_keys = nullptr;  // KV source: [max_context / ratio, index_row]
  float* comp_kv = nullptr;       // ratio-2 KV source: fp32 k_t [ring_capacity, d] by slot q % capacity
  float* comp_gate = nullptr;     // ratio-2 KV source: fp32 g_t [ring_capacity, d]
                                  // (V4: [proj_cap, proj_width] of every compressed layer)
  float* idx_comp_kv = nullptr;   // V4 ratio 4: the indexer compressor's [proj_cap, 2*ihd]
  float* idx_comp_gate = nullptr;
};

class StreamCaches {
 public:
  // Allocates the caches of one stream and zeroes them on `s`, the CUDA stream that will use them
  // (ordered before its later work: a clear on another stream could land after a restore's copies
  // or a first forward's writes); refuses when the device is out of memory.
  static StatusOr<std::unique_ptr<StreamCaches>> create(const AttnGeometry& g, cudaStream_t s = nullptr);
  // Device bytes one stream takes (admission accounting).
  static int64_t device_bytes(const AttnGeometry& g);

  const AttnGeometry& geometry() const { return geo_; }
  const LayerCachesDev& layer(int l) const { return layers_[l]; }
  uint8_t* dspark_ring(int stage) const { return dspark_[stage]; }  // [ring_capacity, window_row]

  // Positions whose caches are written. The forward commits the new length after a call's last
  // layer; pieces of the next call start there.
  int64_t length() const { return length_; }
  Status commit(int64_t length);
  // Rolls back to `length` (>= length() - max_rollback): rows at or after it are dropped; rings
  // keep older positions, so the next piece continues exactly as if the dropped rows never came.
  Status truncate(int64_t length);
  // Snapshot of every cache (written rows only) and back; from_bytes refuses another geometry.
  StatusOr<std::vector<uint8_t>> to_bytes(cudaStream_t s = nullptr) const;
  Status from_bytes(const std::vector<uint8_t>& bytes, cudaStream_t s = nullptr);

 private:
  explicit StreamCaches(const AttnGeometry& g) : geo_(g) {}
  AttnGeometry geo_;
  DeviceBuffer mem_;
  std::vector<LayerCachesDev> layers_;
  std::vector<uint8_t*> dspark_;
  int64_t length_ = 0;
};

}  // namespace dsv4::cuda
