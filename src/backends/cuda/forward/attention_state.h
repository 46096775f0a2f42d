// Per-stream attention caches on the device (model-spec.md §3.11, §4.2), in the production packed
// row formats: per layer a window ring of FP8 rows (capacity = window + max rollback); per KV-source
// layer the compressed KV rows (288 B FP4 or 528 B FP8 at V4.1 sizes) and index-key rows (68 B),
// sized for a maximum context, and the ratio-2 compressor's fp32 projection rings; plus the DSpark
// stages' window rings. One device allocation per stream.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "family/deepseek_v41/layer_plan.h"
#include "family/deepseek_v41/state_geometry.h"
#include "backends/cuda/runtime/device_buffer.h"
#include "core/status.h"

namespace dsv4::cuda {

// The caches' shapes are the family's stream-state geometry (family/deepseek_v41/state_geometry.h) with fp32
// projection rings: per layer a window ring, the compressed / index-key row tables sized for max_context, the
// pooling compressors' projection rings (and the V4 ratio-4 indexer's), then the DSpark stages' rings.
// Refuses shapes the device kernels do not hold (max_context <= 0, max_rollback < 0).
StatusOr<family::StateGeometry> device_state_geometry(const family::ModelPlan& plan, int64_t max_context,
                                                      int64_t max_rollback, bool dspark = true);

// A stream's snapshot in the layout the geometry describes (as every backend's): the append-only row tables
// (row_tables(), here without the token history, which the forward keeps on the host) and the bounded part.
struct CacheParts {
  std::vector<uint8_t> bounded;
  std::vector<std::vector<uint8_t>> rows;  // [table] rows for positions [from, length)
};

// Device pointers of one layer's caches inside a stream's allocation (null where absent).
struct LayerCachesDev {
  uint8_t* window = nullptr;      // [ring_capacity, window_row]
  uint8_t* compressed = nullptr;  // KV source: [max_context / ratio, compressed_row]; row j = position j*ratio
  uint8_t* index_keys = nullptr;  // KV source: [max_context / ratio, index_row]
  float* comp_kv = nullptr;       // pooling KV source: fp32 k_t [proj_kv.capacity, proj_kv.width] by slot q % capacity
  float* comp_gate = nullptr;     // pooling KV source: fp32 g_t, the same shape
  float* idx_comp_kv = nullptr;   // V4 ratio 4: the indexer compressor's [idx_proj_kv.capacity, 2*ihd]
  float* idx_comp_gate = nullptr;
};

class StreamCaches {
 public:
  // Allocates the caches of one stream and zeroes them on `s`, the CUDA stream that will use them
  // (ordered before its later work: a clear on another stream could land after a restore's copies
  // or a first forward's writes); refuses when the device is out of memory.
  static StatusOr<std::unique_ptr<StreamCaches>> create(const family::StateGeometry& g, cudaStream_t s = nullptr);
  // Device bytes one stream takes (admission accounting).
  static int64_t device_bytes(const family::StateGeometry& g);

  const family::StateGeometry& geometry() const { return geo_; }
  const LayerCachesDev& layer(int l) const { return layers_[l]; }
  uint8_t* dspark_ring(int stage) const { return dspark_[stage]; }  // [ring_capacity, window_row]

  // Positions whose caches are written. The forward commits the new length after a call's last
  // layer; pieces of the next call start there.
  int64_t length() const { return length_; }
  Status commit(int64_t length);
  // Rolls back to `length` (>= length() - max_rollback): rows at or after it are dropped; rings
  // keep older positions, so the next piece continues exactly as if the dropped rows never came.
  Status truncate(int64_t length);
  // Snapshots. to_parts: the bounded part (a header naming the layout, then the ring slots the geometry's
  // window_slots and group_slots name) and each row table's rows from position `from`; from_parts rebuilds the
  // caches from a bounded part and each table's rows [0, n) as chunks, refusing another layout or tables that do
  // not hold exactly the bounded part's rows. A snapshot restores into caches of any max_context that holds it
  // and any max_rollback. to_bytes / from_bytes: the same as one buffer (parts from position 0).
  StatusOr<CacheParts> to_parts(int64_t from, cudaStream_t s = nullptr) const;
  Status from_parts(std::span<const uint8_t> bounded, std::span<const std::vector<std::span<const uint8_t>>> tables,
                    cudaStream_t s = nullptr);
  StatusOr<std::vector<uint8_t>> to_bytes(cudaStream_t s = nullptr) const;
  Status from_bytes(std::span<const uint8_t> bytes, cudaStream_t s = nullptr);

 private:
  explicit StreamCaches(const family::StateGeometry& g) : geo_(g) {}
  family::StateGeometry geo_;
  DeviceBuffer mem_;
  std::vector<LayerCachesDev> layers_;
  std::vector<uint8_t*> dspark_;
  int64_t length_ = 0;
};

}  // namespace dsv4::cuda
