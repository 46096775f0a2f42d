// Per-stream attention caches on the device (model-spec.md §3.11, §4.2), in the production packed
// row formats: per layer a window ring of FP8 rows (capacity = window + max rollback); per KV-source
// layer the compressed KV rows (288 B FP4 or 528 B FP8 at V4.1 sizes) and index-key rows (68 B),
// up to a maximum context, and the ratio-2 compressor's fp32 projection rings; plus the DSpark
// stages' window rings. The rings and the page table sit in one slab of the KV pool, the rows in its
// pages as the stream grows (family/deepseek_v41/state_pages.h, kv_pool.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "family/deepseek_v41/layer_plan.h"
#include "family/deepseek_v41/state_geometry.h"
#include "family/deepseek_v41/state_pages.h"
#include "backends/cuda/forward/kv_pool.h"
#include "backends/cuda/kernels/attention/row_pages.cuh"
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
  RowPages compressed;            // KV source: compressed_row bytes a row; row j = position j*ratio
  RowPages index_keys;            // KV source: index_row bytes a row
  float* comp_kv = nullptr;       // pooling KV source: fp32 k_t [proj_kv.capacity, proj_kv.width] by slot q % capacity
  float* comp_gate = nullptr;     // pooling KV source: fp32 g_t, the same shape
  float* idx_comp_kv = nullptr;   // V4 ratio 4: the indexer compressor's [idx_proj_kv.capacity, 2*ihd]
  float* idx_comp_gate = nullptr;
};

class StreamCaches {
 public:
  // A stream's caches in `pool` (which must outlive them): its slab, zeroed on `s`, the CUDA stream that will use
  // them (ordered before its later work: a clear on another stream could land after a restore's copies or a first
  // forward's writes), and no pages yet; refuses when the pool has no slab left.
  static StatusOr<std::unique_ptr<StreamCaches>> create(const family::StateGeometry& g, const family::PageLayout& pages,
                                                        KvPool* pool, cudaStream_t s = nullptr);
  ~StreamCaches();
  StreamCaches(const StreamCaches&) = delete;
  StreamCaches& operator=(const StreamCaches&) = delete;

  // Pages for positions [0, positions) (<= max_context): the missing ones from the pool, zeroed on `s`, their
  // page-table entries copied to the device on `s`. All or none; resource_exhausted when the pool is short.
  Status reserve(int64_t positions, cudaStream_t s);
  // Pages the stream would take to hold `positions` positions.
  int64_t pages_wanted(int64_t positions) const;
  int64_t pages_held() const { return static_cast<int64_t>(pages_.size()); }
  const family::PageLayout& page_layout() const { return layout_; }
  // Bytes [at, at + bytes.size()) of row table t (page_layout().tables[t], its rows end to end) copied from the host
  // on `s` (staged before the call returns); the pages they fall in must be held (reserve).
  Status write_table(size_t t, int64_t at, std::span<const uint8_t> bytes, cudaStream_t s);

  const family::StateGeometry& geometry() const { return geo_; }
  const LayerCachesDev& layer(int l) const { return layers_[l]; }
  uint8_t* dspark_ring(int stage) const { return dspark_[stage]; }  // [ring_capacity, window_row]

  // Positions whose caches are written. The forward commits the new length after a call's last
  // layer; pieces of the next call start there.
  int64_t length() const { return length_; }
  Status commit(int64_t length);
  // Rolls back to `length` (>= length() - max_rollback): rows at or after it are dropped (pages that then hold none go
  // back to the pool); rings keep older positions, so the next piece continues exactly as if the dropped rows never
  // came.
  Status truncate(int64_t length);
  // Snapshots. to_parts: the bounded part (a header naming the layout, then the ring slots the geometry's
  // window_slots and group_slots name) and each row table's rows from position `from`; from_parts rebuilds the
  // caches from a bounded part and each table's rows [0, n) as chunks, refusing another layout or tables that do
  // not hold exactly the bounded part's rows. A snapshot restores into caches of any max_context that holds it,
  // any max_rollback and any page size. to_bytes / from_bytes: the same as one buffer (parts from position 0).
  StatusOr<CacheParts> to_parts(int64_t from, cudaStream_t s = nullptr) const;
  Status from_parts(std::span<const uint8_t> bounded, std::span<const std::vector<std::span<const uint8_t>>> tables,
                    cudaStream_t s = nullptr);
  StatusOr<std::vector<uint8_t>> to_bytes(cudaStream_t s = nullptr) const;
  Status from_bytes(std::span<const uint8_t> bytes, cudaStream_t s = nullptr);

 private:
  StreamCaches(const family::StateGeometry& g, const family::PageLayout& p, KvPool* pool)
      : geo_(g), layout_(p), pool_(pool) {}
  family::StateGeometry geo_;
  family::PageLayout layout_;
  KvPool* pool_ = nullptr;
  uint8_t* slab_ = nullptr;
  uint8_t** table_ = nullptr;    // the device page table, in the slab
  std::vector<uint8_t*> pages_;  // its entries held, page k for positions [k P, (k + 1) P)
  std::vector<LayerCachesDev> layers_;
  std::vector<uint8_t*> dspark_;
  int64_t length_ = 0;
};

}  // namespace dsv4::cuda
