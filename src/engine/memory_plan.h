// The memory plan: what each GPU and the host must hold to serve a model, made before anything is allocated.
//
// Per rank (GPU): its weight share (weight_share.h), `parallel` streams' device caches at max_context
// (family/deepseek_v41/state_geometry.h), the forward's scratch for calls of max_call_rows rows
// (scratch_estimate.h), the runtime's fixed overhead (kDeviceRuntimeBytes, kGraphBytes, kNcclBytes below)
// and a margin. Per host (the one running rank 0 and `ranks_per_host` ranks): the Engram tables (one copy,
// pinned, or in the page cache when memory-mapped, or read from disk), each rank process's pinned staging
// buffers and runtime, the streams' token history and the prompt cache.
// check_fits() turns a plan that does not fit into one resource_exhausted error naming every shortfall and,
// for each flag that could change it, what that flag would give (each computed by planning again).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/scratch_estimate.h"
#include "engine/weight_share.h"
#include "fabric/split_plan.h"
#include "family/deepseek_v41/config.h"
#include "family/deepseek_v41/exl3_layout.h"
#include "family/deepseek_v41/tensors.h"

namespace dsv4::engine {

// Where the Engram tables (V4.1: 2 x 101.4 GB with scales) live while serving.
enum class EngramPlacement : uint8_t {
  pinned,  // a page-locked host copy the GPU reads row by row (serve --engram pinned)
  mapped,  // the checkpoint's shards memory-mapped, the rows a step hashes to gathered on the host: no anonymous
           // memory, the page cache keeps hot rows (the CUDA backend's default)
  disk,    // read from SSD per step: no host memory held for them
};
std::string_view engram_placement_name(EngramPlacement p);
StatusOr<EngramPlacement> parse_engram_placement(std::string_view name);  // "pinned" | "mapped" | "disk"

// Runtime overhead per GPU, stated (not derived from the model):
// - CUDA context, module images, cuBLAS and streams: the context alone measured 526 MiB on an H100 (CUDA 13,
//   driver 580: cudaMemGetInfo after cudaFree(0)); rounded up to 1 GiB for the backend's kernel images
//   (loaded lazily) and per-stream state.
inline constexpr int64_t kDeviceRuntimeBytes = int64_t{1} << 30;
// - CUDA graphs: the forward keeps 64 (cuda::ForwardOptions::graph_capacity); 64 graphs of 400 kernel nodes
//   took 80 MiB on an H100 (1.25 MiB each); assuming about 1,500 launches per decode graph (40 layers of
//   roughly 35, an estimate), 4 MiB each.
inline constexpr int64_t kGraphBytes = int64_t{256} << 20;
// - NCCL communicator buffers at tp > 1 (channels x peers x 4 MiB NCCL_BUFFSIZE); not measured here.
inline constexpr int64_t kNcclBytes = int64_t{1} << 30;
// Margin per GPU: allocator rounding and whatever this estimate misses; 2% of the rest, at least 512 MiB.
inline constexpr double kMarginFraction = 0.02;
inline constexpr int64_t kMinMarginBytes = int64_t{512} << 20;
// Host memory per rank process besides its staging buffers: CUDA driver and runtime state, libraries'
// private pages, tokenizer and Engram token map (tens of MB); a stated estimate, not measured.
inline constexpr int64_t kHostRuntimeBytes = int64_t{1} << 30;

struct MemoryPlanInputs {
  family::Config config;
  // The stored weights: empty = the release checkpoint of `config` (family::expected_tensors); an EXL3
  // pack passes its own tensors plus the release's Engram tables (which stay in the release shards).
  std::vector<StoredTensor> tensors;
  bool exl3_pack = false;
  int32_t tp = 1;                       // tensor-parallel ranks (one GPU each)
  int32_t ranks_per_host = 0;           // ranks on the host running rank 0; 0 = tp (one host)
  int64_t max_context = 4096;           // positions per stream (serve --context)
  int32_t parallel = 4;                 // streams held at once (serve --parallel)
  int64_t kv_pool_tokens = 0;           // positions the KV pool's pages hold for all streams (serve --kv-pool-tokens);
                                        // 0: every stream at max_context
  int64_t max_rollback = 128;           // rows a stream can be rolled back by (the lane backend's)
  int64_t max_call_rows = 4096;         // rows of one forward call: the prefill chunk (cli/backend_choice.h)
  bool drafter = true;                  // upload the DSpark drafter (V4.1; the 0731 drafter is not run)
  // The device vision tower on rank 0 (serve --backend cuda at tp 1, a config with vision_config): its weights and
  // one largest image's scratch (engine/vision_memory.h) join rank 0's weights and scratch.
  bool vision_tower = false;
  EngramPlacement engram = EngramPlacement::mapped;
  int64_t staging_bytes = int64_t{512} << 20;      // pinned load buffers per rank process (2 x 256 MiB)
  int64_t prompt_cache_bytes = int64_t{256} << 20; // serve --prompt-cache-mib, on rank 0's host
  int64_t device_memory = 0;            // bytes per GPU; 0 = unknown (then no verdict)
  int64_t host_memory = 0;              // bytes available on the host; 0 = unknown (then no verdict)
};

struct RankMemory {
  int32_t rank = 0;
  int64_t weights = 0;          // its share, drafter included
  int64_t drafter_weights = 0;  // of which the DSpark stages
  int64_t caches = 0;           // the KV pool: parallel stream slabs and the pages (parallel x one stream's device
                                // caches at max_context, or the pages for kv_pool_tokens)
  int64_t scratch = 0;
  int64_t vision_weights = 0;   // of weights, the device vision tower's (rank 0, inputs.vision_tower)
  int64_t vision_scratch = 0;   // of scratch, the device vision tower's
  int64_t runtime = 0;          // context, graphs, NCCL
  int64_t margin = 0;
  int64_t need() const { return weights + caches + scratch + runtime + margin; }
};

struct HostMemory {
  int64_t engram = 0;           // anonymous (pinned) bytes of the Engram tables
  int64_t engram_page_cache = 0;// mapped: the tables' file pages the page cache would like to keep (not needed)
  int64_t staging = 0;          // ranks_per_host x staging_bytes
  int64_t runtime = 0;          // ranks_per_host x kHostRuntimeBytes
  int64_t history = 0;          // ranks_per_host x parallel x max_context x 8 (token history, host side)
  int64_t prompt_cache = 0;
  int64_t need() const { return engram + staging + runtime + history + prompt_cache; }
};

// What a plan's weight share is computed from (one config); plans made from another plan's basis reuse it.
struct PlanBasis {
  std::shared_ptr<const family::TensorTable> release;  // family::expected_tensors(config)
  std::shared_ptr<const fabric::SplitPlan> split;      // over `release` for the plan's tp (expert_parallel)
  std::shared_ptr<const family::Exl3PackPlan> pack;    // the EXL3 layout, once a pack was planned
};

struct MemoryPlan {
  MemoryPlanInputs inputs;      // as given, with tensors filled in
  PlanBasis basis;
  bool drafter = false;         // the drafter is uploaded (inputs.drafter and a V4.1 model)
  int64_t stream_bytes = 0;     // one stream's device caches at max_context
  int64_t stream_ring_bytes = 0;       // of which rings (independent of context)
  int64_t stream_bytes_per_position = 0;  // the row tables' bytes per max_context position (rounded down)
  ScratchEstimate scratch;      // per rank
  WeightShare share;
  std::vector<RankMemory> ranks;
  HostMemory host;
  std::vector<std::string> notes;  // facts worth a line under the table

  bool device_known() const { return inputs.device_memory > 0; }
  bool host_known() const { return inputs.host_memory > 0; }
  int64_t max_rank_need() const;
  bool devices_fit() const;     // every rank's need <= device_memory (false when unknown)
  bool host_fits() const;       // host need <= host_memory (false when unknown)
  bool fits() const { return devices_fit() && host_fits(); }
};

// The plan for these inputs; invalid_argument when the model cannot be split over tp ranks or the inputs
// are out of range (named).
StatusOr<MemoryPlan> plan_memory(const MemoryPlanInputs& inputs);
// The same, reusing what `basis` holds (made for the same config): its release table, its split plan when
// the tp matches, its pack layout.
StatusOr<MemoryPlan> plan_memory(const MemoryPlanInputs& inputs, const PlanBasis& basis);

// `base` again with other runtime inputs (context, parallel, rows, rollback, Engram placement, staging, prompt
// cache, memory sizes) and the same weights: `changed`'s tensors, tp, exl3_pack and drafter are ignored.
StatusOr<MemoryPlan> replan_runtime(const MemoryPlan& base, const MemoryPlanInputs& changed);

// ok when the plan fits; invalid_argument when device or host memory is unknown; else resource_exhausted
// naming each shortfall with its numbers and the flags that would change it (--tp, an EXL3 pack,
// --context, --parallel, --engram, --prompt-cache-mib), each with what it would need or save.
Status check_fits(const MemoryPlan& plan);

// The plan as a table: one line per rank plus the host, human units, and a verdict line.
std::string format_memory_plan(const MemoryPlan& plan);

// MemAvailable of /proc/meminfo in bytes; not_found where there is none.
StatusOr<int64_t> host_memory_available(const std::string& meminfo_path = "/proc/meminfo");

}  // namespace dsv4::engine
