// The CUDA forward with the oracle's API (cpu/forward.h): streams fed in pieces at their current
// length (several streams per call, prompt pieces or verify windows), fp32 logits of requested
// rows, rollback, whole-state snapshots and the DSpark drafter — every row computed on the device
// with the oracle's rounding points and an order of operations independent of the call's shape.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "engine/step_plan.h"
#include "engine/stream_forward.h"
#include "backends/cuda/runtime/call_meta.h"
#include "backends/cuda/forward/forward_block.h"
#include "backends/cuda/runtime/graph_cache.h"
#include "backends/cuda/kernels/sample/row_draws.cuh"
#include "backends/cuda/model/model.h"
#include "family/deepseek_v41/state_geometry.h"
#include "family/deepseek_v41/state_pages.h"
#include "backends/cuda/forward/kv_pool.h"
#include "core/status.h"

namespace dsv4::cuda {

// A call's row draws (forward_draws.cc): one per logit row in call order (the plan's logit rows follow the
// pieces), or none when every row is whole; and the words of the distinct token masks they use, one after
// another (RowDrawDev::mask: a mask's first word).
struct CallDraws {
  std::vector<RowDrawDev> draws;
  std::vector<uint64_t> masks;
};
CallDraws call_draws(const std::vector<engine::Piece>& pieces, int64_t vocab);

class Arena;
class Collective;
class StreamCaches;

struct ForwardOptions {
  int64_t max_context = 65536;   // positions one stream may hold
  int64_t max_rollback = 128;    // rows a stream can be truncated back by
  int64_t max_call_rows = 2048;  // rows of one forward call, all pieces together (sizes the scratch)
  // Calls of at most graph_max_rows rows (decode and verify rounds) run as CUDA graphs keyed by
  // their rows, logit rows and position bound (the largest position rounded up to graph_pos_granule):
  // their tables take a layout of rows alone (CallCtx::fixed_layout), whatever the pieces and the
  // groups they complete. A key runs eagerly once before it is captured (one-off shapes are never
  // captured).
  bool cuda_graphs = true;
  int64_t graph_max_rows = 256;
  int64_t graph_pos_granule = 256;
  size_t graph_capacity = 64;     // graphs kept (least recently used dropped)
  // A tensor-parallel rank (model cut by fabric/rank_weights.h): the collectives joining the ranks'
  // partial results (tp_forward.h); every rank must make the same calls in the same order. Unset: one GPU.
  std::shared_ptr<Collective> collective;
  // Bounded decoder replay (docs/replay.md): the layers above the last one every row must reach compute
  // only the rows the logits asked for and the streams' caches need — the same bits as every row. Off:
  // every layer computes every row. Not taken while a probe is set (probes see every row) nor by the V4
  // attention (V4-Flash-0731 has no such layer anyway). Calls whose rows shrink run without CUDA graphs.
  bool bounded_replay = true;
  // The KV pool (kv_pool.h): pages of kv_page_positions positions (0: family::kDefaultPagePositions, raised to the
  // largest compression ratio). kv_pool_streams > 0: a fixed pool allocated by create, of that many stream slabs and
  // pages for kv_pool_positions positions (0: kv_pool_streams streams at max_context); open_stream beyond the slabs,
  // or a call whose streams outgrow the pages, is refused with resource_exhausted. kv_pool_streams = 0: a pool that
  // grows as streams ask.
  int64_t kv_page_positions = 0;
  int32_t kv_pool_streams = 0;
  int64_t kv_pool_positions = 0;
};

// Called after every backbone layer with the call's streams h bf16 [rows, C, D] (tests compare
// layers against the oracle); empty function: no copies.
using LayerProbe = std::function<void(int layer, const std::vector<float>& h)>;

// Named sub-layer outputs of one layer ("engram", "attn.in", "attn.out", "attn.h", "ffn.in", "ffn.out") and the
// head's normed input ("final_norm", as layer n_layers), as the oracle's OracleOptions::op_probe names them
// (tests, `dsv4 run --dump-hidden`; the forward runs eagerly and synchronizes at every probe while one is set).
using OpProbe = std::function<void(int layer, const char* op, const std::vector<float>& v)>;

class Forward {
 public:
  static StatusOr<std::unique_ptr<Forward>> create(std::shared_ptr<const ModelDevice> model,
                                                   const ForwardOptions& options);
  ~Forward();

  const family::ModelPlan& config() const { return model_->config; }
  const ModelDevice& model() const { return *model_; }
  const ForwardOptions& options() const { return options_; }
  StatusOr<int32_t> open_stream();
  Status close_stream(int32_t stream);
  StatusOr<int64_t> length(int32_t stream) const;

  // One forward over every piece (each stream at most once per call); logits fp32 per piece. Rows a piece's draws ask
  // reduced (engine::RowDraw) are reduced on the device (kernels/sample/row_draws.cuh) and come back as picks.
  StatusOr<std::vector<engine::PieceResult>> forward(const std::vector<engine::Piece>& pieces);
  // The same with each piece's whole rows left in the forward's pinned buffer: (*rows)[i], valid until the next call
  // (engine::StreamForward::forward_viewed). The whole rows of a call come back in one copy.
  Status forward_viewed(const std::vector<engine::Piece>& pieces, std::vector<engine::PieceResult>* out,
                        std::vector<std::span<const float>>* rows);
  Status truncate(int32_t stream, int64_t length);
  StatusOr<std::vector<uint8_t>> snapshot(int32_t stream) const;
  Status restore(int32_t stream, const std::vector<uint8_t>& bytes);
  // Split snapshots (the family's layout, StateGeometry): the row tables (token history first), the bounded
  // part with each table's rows from `from`, and a stream rebuilt from a bounded part and every table's rows.
  std::vector<family::RowTableShape> row_tables() const;
  StatusOr<engine::StateParts> snapshot_parts(int32_t stream, int64_t from) const;
  Status restore_parts(int32_t stream, std::span<const uint8_t> bounded,
                       std::span<const std::vector<std::span<const uint8_t>>> tables);
  // DSpark: drafts the block after `next` (the token sampled for position length(stream)); logits filled.
  StatusOr<engine::DraftResult> draft(int32_t stream, int32_t next);
  // DSpark drafts of several streams in one pass (StreamForward::draft_batch): each group of streams that fits the
  // scratch (all of them, short of max_call_rows / dspark_block streams) in one set of launches over its rows, and one
  // synchronization for the whole batch. Result i, for asks[i], is bit for bit draft(asks[i].stream, asks[i].next).
  StatusOr<std::vector<engine::DraftResult>> draft_batch(std::span<const engine::DraftAsk> asks, bool logits);

  // Benchmarks only: an empty stream declared to hold `length` positions, its caches left zeroed
  // (valid rows of value 0) and its Engram history DEAD, so steps can be timed at a long context
  // without prefilling it. Never used for output.
  Status assume_length(int32_t stream, int64_t length);

  void set_layer_probe(LayerProbe probe) { probe_ = std::move(probe); }
  void set_op_probe(OpProbe probe) { op_probe_ = std::move(probe); }
  // Benchmarks only: while set, each MoE layer's selected experts [rows, K] after its router (calls run eagerly and
  // synchronize there); `dsv4 bench` counts the experts a step touches from them.
  using RoutingProbe = std::function<void(int layer, const std::vector<int32_t>& experts)>;
  void set_routing_probe(RoutingProbe probe) { routing_probe_ = std::move(probe); }
  // Per-op milliseconds accumulate into *profile while set (benchmarks and tests; calls run
  // eagerly). synchronized: each op is synchronized around (host wall time, a device fault names its
  // op); otherwise each op is bracketed by events with no synchronization (device time per op).
  void set_profile(std::map<std::string, double>* profile, bool synchronized = true) {
    profile_ = profile;
    profile_sync_ = synchronized;
  }
  // Benchmarks only: while set, each backbone layer's device time in a call (events on the forward's stream around
  // its Engram, DSpark tap and block; no synchronization) adds into (*ms)[layer]; calls run eagerly. Unset: the
  // layer loop only tests the pointer.
  void set_layer_times(std::vector<double>* ms) { layer_times_ = ms; }
  cudaStream_t stream() const { return stream_; }
  // The streams' device memory: its paged layout and the pool (admission reads its free slabs and pages).
  const family::PageLayout& page_layout() const { return pages_; }
  const KvPool& kv_pool() const { return *pool_; }
  // Graph replays, captures and eager runs of the forward's calls so far (tests, benchmarks).
  const GraphCache::Stats& graph_stats() const { return graphs_->stats(); }
  // Off: every call runs eagerly (tests compare both ways); the captured graphs are kept.
  void set_cuda_graphs(bool on) { graphs_on_ = on; }
  // ForwardOptions::bounded_replay for the following calls (tests and `dsv4 bench` compare both ways).
  void set_bounded_replay(bool on) { options_.bounded_replay = on; }
  // The cones bounded replay computes (family/deepseek_v41/replay.h; from = -1: no bounded layer).
  const family::ReplayShape& replay_shape() const { return replay_; }
  // The rows whose output each backbone layer computed in the last call, all pieces together (tests).
  const std::vector<int64_t>& layer_rows() const { return layer_rows_; }

 private:
  struct StreamSlot {
    std::unique_ptr<StreamCaches> caches;
    std::vector<int64_t> history;  // Engram compressed ids per position (-1 = DEAD)
  };
  Forward() = default;
  // A restore into `slot`: its caches and history dropped, fresh caches filled by `fill`; on an error the stream is
  // left empty (0 rows) and usable.
  Status refill(StreamSlot& slot, const std::function<Status(StreamCaches&)>& fill);
  // forward_viewed with mu_ held.
  Status forward_locked(const std::vector<engine::Piece>& pieces, std::vector<engine::PieceResult>* out,
                        std::vector<std::span<const float>>* rows);
  // Enqueues one call: metadata upload, the device work (graph replay or eager), the DSpark rings, the row draws
  // (`draws`: one per logit row, or empty: every row whole; `masks`: the words of their token masks, at
  // RowDrawDev::mask) and the copies of the picks into picks_host_ and of the
  // whole rows (in order) into logits_host_; the caller synchronizes. logits_dev_ holds the call's device logits.
  Status run(const engine::StepPlan& plan, std::span<const RowDrawDev> draws, std::span<const uint64_t> masks);
  // After the call's synchronization (forward_draws.cc): each piece's picks from picks_host_ and its whole rows,
  // reductions that came back whole (a non-finite logit, too many candidates) copied from logits_dev_ first.
  Status collect_draws(const std::vector<engine::Piece>& pieces, std::span<const RowDrawDev> draws,
                       std::vector<engine::PieceResult>* out, std::vector<std::span<const float>>* rows);
  // Embedding, every layer and the head on `s` from metadata already staged (see run()).
  struct DeviceCall;
  OpCtx op_ctx(cudaStream_t s);  // with the profile mode set
  Status device_call(const DeviceCall& d, cudaStream_t s);

  std::shared_ptr<const ModelDevice> model_;
  ForwardOptions options_;
  std::unique_ptr<family::StateGeometry> geo_;
  family::PageLayout pages_;
  std::unique_ptr<KvPool> pool_;  // before streams_: destroyed after every stream gave its slab and pages back
  family::ReplayShape replay_;
  std::vector<int64_t> layer_rows_;
  cudaStream_t stream_ = nullptr;
  SideStream side_;  // OpCtx::side, CallCtx::side
  std::unique_ptr<Arena> scratch_;
  std::unique_ptr<CallMeta> meta_;
  std::unique_ptr<GraphCache> graphs_;
  PinnedBuffer logits_host_;  // f32 [logit rows, V] of the last call: its whole rows first, in order
  PinnedBuffer draft_host_;   // the last draft batch's tables and results (dspark_draft_host_bytes per group)
  PinnedBuffer picks_host_;   // RowPickDev [logit rows] of the last call with row draws
  std::vector<float> assembled_;  // f32 [whole rows, V] in order, when some reduction of the last call came back whole
  const float* logits_dev_ = nullptr;  // the call's device logits f32 [logit rows, V] (scratch; until the call ends)
  bool graphs_on_ = true;
  std::map<int32_t, StreamSlot> streams_;
  int32_t next_id_ = 0;
  LayerProbe probe_;
  OpProbe op_probe_;
  RoutingProbe routing_probe_;
  std::map<std::string, double>* profile_ = nullptr;
  bool profile_sync_ = true;
  std::vector<ProfileMark> marks_;  // event-mode sections of the call in flight
  std::vector<double>* layer_times_ = nullptr;
  std::vector<LayerMark> layer_marks_;  // set_layer_times: the layers of the call in flight
  mutable std::mutex mu_;
};

// The CUDA forward behind the lane adapter's StreamForward.
std::unique_ptr<engine::StreamForward> cuda_stream_forward(std::unique_ptr<Forward> forward);

}  // namespace dsv4::cuda
