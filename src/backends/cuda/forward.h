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
#include <string>
#include <vector>

#include "backends/cpu/forward.h"
#include "backends/cpu/stream_forward.h"
#include "backends/cuda/model.h"
#include "core/status.h"

namespace dsv4::cuda {

class Arena;
class StreamCaches;
struct AttnGeometry;

struct ForwardOptions {
  int64_t max_context = 65536;   // positions one stream may hold
  int64_t max_rollback = 128;    // rows a stream can be truncated back by
  int64_t max_call_rows = 2048;  // rows of one forward call, all pieces together (sizes the scratch)
};

// Called after every backbone layer with the call's streams h bf16 [rows, C, D] (tests compare
// layers against the oracle); empty function: no copies.
using LayerProbe = std::function<void(int layer, const std::vector<float>& h)>;

class Forward {
 public:
  static StatusOr<std::unique_ptr<Forward>> create(std::shared_ptr<const ModelDevice> model,
                                                   const ForwardOptions& options);
  ~Forward();

  const cpu::ModelConfig& config() const { return model_->config; }
  const ModelDevice& model() const { return *model_; }
  const ForwardOptions& options() const { return options_; }
  StatusOr<int32_t> open_stream();
  Status close_stream(int32_t stream);
  StatusOr<int64_t> length(int32_t stream) const;

  // One forward over every piece (each stream at most once per call); logits fp32 per piece.
  StatusOr<std::vector<cpu::PieceResult>> forward(const std::vector<cpu::Piece>& pieces);
  Status truncate(int32_t stream, int64_t length);
  StatusOr<std::vector<uint8_t>> snapshot(int32_t stream) const;
  Status restore(int32_t stream, const std::vector<uint8_t>& bytes);
  // DSpark: drafts the block after `next` (the token sampled for position length(stream)).
  StatusOr<cpu::DraftResult> draft(int32_t stream, int32_t next);

  // Benchmarks only: an empty stream declared to hold `length` positions, its caches left zeroed
  // (valid rows of value 0) and its Engram history DEAD, so steps can be timed at a long context
  // without prefilling it. Never used for output.
  Status assume_length(int32_t stream, int64_t length);

  void set_layer_probe(LayerProbe probe) { probe_ = std::move(probe); }
  // Per-op milliseconds accumulate into *profile while set (each op synchronized; benchmarks only).
  void set_profile(std::map<std::string, double>* profile) { profile_ = profile; }
  cudaStream_t stream() const { return stream_; }

 private:
  struct StreamSlot {
    std::unique_ptr<StreamCaches> caches;
    std::vector<int64_t> history;  // Engram compressed ids per position (-1 = DEAD)
  };
  Forward() = default;
  Status run(const std::vector<cpu::Piece>& pieces, std::vector<cpu::PieceResult>& out);

  std::shared_ptr<const ModelDevice> model_;
  ForwardOptions options_;
  std::unique_ptr<AttnGeometry> geo_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<Arena> scratch_;
  std::map<int32_t, StreamSlot> streams_;
  int32_t next_id_ = 0;
  LayerProbe probe_;
  std::map<std::string, double>* profile_ = nullptr;
  mutable std::mutex mu_;
};

// The CUDA forward behind the lane adapter's StreamForward.
std::unique_ptr<cpu::StreamForward> cuda_stream_forward(std::unique_ptr<Forward> forward);

}  // namespace dsv4::cuda
