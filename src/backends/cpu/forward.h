// The CPU oracle's public API: streams fed in pieces at their current length (several streams
// per call, prompt pieces or multi-row verify windows), fp32 logits of requested rows, rollback,
// whole-state snapshots and the DSpark drafter. Plain data in and out.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "backends/cpu/stream_state.h"
#include "engine/stream_forward.h"
#include "family/deepseek_v41/model.h"
#include "family/deepseek_v41/replay.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace dsv4::cpu {

enum class Precision : uint8_t { ref32, ref64 };  // float or double accumulation, same roundings

struct OracleOptions {
  Precision precision = Precision::ref32;
  int threads = 0;            // 0: hardware concurrency
  int64_t max_rollback = 128; // rows a stream can be truncated back by
  // Reproduce the reference's call-shape-dependent behaviour for comparisons with its
  // prefill-then-decode runs: prefill window lists of width min(T, window), decode window lists
  // with the empty ring slots first, and the stale index keys of ratio-2 owners on decode steps
  // at even positions. Breaks pieces == whole; off by default (model-spec.md §3.6, §6.2).
  bool reference_shapes = false;
  // Called after every backbone layer with the call's streams h bf16 [rows, C, D] (per-layer
  // comparisons of other backends against the oracle); empty: nothing is copied.
  std::function<void(int layer, const std::vector<float>& h)> layer_probe;
  // Named sub-layer outputs of every backbone layer ("engram" h after Engram, then the block's "attn.in",
  // "attn.out", "attn.h", "ffn.in", "ffn.out"; see block.h) and, as layer n_layers, "final_norm" (the head's
  // normed input [logit rows, D], per piece); tests and `dsv4 run --dump-hidden`. Empty: no copies.
  std::function<void(int layer, const char* op, const std::vector<float>& v)> op_probe;
  // Test-only (`dsv4 run --dump-pre-round`; docs/numerics.md, row by row): at each backbone layer in
  // pre_round_layers (every layer when empty), the values its bf16 roundings round, before rounding, in the
  // accumulator's width, [rows, n / rows]: the layer's input streams ("h_in" [C, D], bf16 values, after Engram),
  // the attention and FFN sub-layers' unrounded mixing coefficients
  // ("attn_mix_pre", "attn_mix_post" [C], "attn_mix_comb" [C, C] source-major; "ffn_mix_*"), collapses
  // ("attn_collapse", "ffn_collapse" [D]), norms ("attn_norm", "ffn_norm" [D]) and expands ("attn_post",
  // "ffn_post" [C, D]); in attention the linears and norms ("wq_a", "q_norm", "wq_b", "wkv", "kv_norm", "wo_a",
  // "wo_b"), RoPE ("q_rope" [H, rope], "kv_rope" [rope], "o_rope" [H, rope], inverse), the probabilities
  // ("probs" [H, window + index_topk]: the window part then the picks, 0 past a row's list) and the output before
  // wo_a ("attn_o" [H, head_dim]). Not on EXL3 linears. Empty: nothing recorded.
  std::function<void(int layer, const char* name, int64_t rows, const std::vector<double>& v)> pre_round_probe;
  std::vector<int> pre_round_layers;
  // Test-only: every quantization step off (activation quant, window / compressed KV and index
  // QDQ), as Hugging Face transformers' DeepSeek-V4 port computes; see tests/hf/README.md.
  bool unquantized = false;
  // Bounded decoder replay (docs/replay.md): the layers above the last one every row must reach compute
  // only the rows the logits asked for and the stream's caches need — the same bits as every row. Off:
  // every layer computes every row. Also off while a probe or pre_round_probe is set (they see every row) and with
  // reference_shapes (its window lists depend on the piece's start).
  bool bounded_replay = true;
};

// The engine's call types (engine/stream_forward.h): the oracle is one of its forwards.
using engine::DraftResult;
using engine::Piece;
using engine::PieceResult;

class Oracle {
 public:
  // The oracle on `model`'s stored weights (read in place: nothing is decoded ahead of a call).
  static StatusOr<std::unique_ptr<Oracle>> create(std::shared_ptr<const family::Model> model,
                                                  const OracleOptions& options);
  ~Oracle();

  const family::ModelPlan& config() const { return cfg_; }
  const family::Model& model() const { return *model_; }
  // Whether the model's drafter runs (V4.1 with DSpark stages; the 0731 drafter's forward is not
  // confirmed by reference code, model-spec.md §10.7, so its stages are checked, not run).
  bool has_drafter() const { return drafter_; }
  int32_t open_stream();
  Status close_stream(int32_t stream);
  StatusOr<int64_t> length(int32_t stream) const;

  // One forward over every piece (each stream at most once per call).
  StatusOr<std::vector<PieceResult>> forward(const std::vector<Piece>& pieces);
  // Rolls a stream back to its first `length` rows (length >= current - max_rollback).
  Status truncate(int32_t stream, int64_t length);
  StatusOr<std::vector<uint8_t>> snapshot(int32_t stream) const;
  Status restore(int32_t stream, const std::vector<uint8_t>& bytes);
  // Split snapshots (stream_state.h): the bounded part and each row table's rows from position `from`; and back.
  StatusOr<StateParts> snapshot_parts(int32_t stream, int64_t from) const;
  Status restore_parts(int32_t stream, std::span<const uint8_t> bounded,
                       std::span<const std::vector<std::span<const uint8_t>>> tables);
  const StateGeometry& geometry() const { return geo_; }
  // The cones bounded replay computes (docs/replay.md); from = -1 when the model has no bounded layer.
  const family::ReplayShape& replay_shape() const { return replay_; }
  // The rows whose output each backbone layer computed in the last forward call, all pieces together
  // (tests: the work bounded replay leaves out).
  const std::vector<int64_t>& layer_rows() const { return layer_rows_; }
  // DSpark: given the token `next` sampled for position length(stream), drafts the following
  // block of tokens greedily from the stream's DSpark rings (the stream itself is unchanged).
  StatusOr<DraftResult> draft(int32_t stream, int32_t next);

 private:
  Oracle() = default;
  template <typename Acc> StatusOr<std::vector<PieceResult>> forward_impl(const std::vector<Piece>& pieces);
  template <typename Acc> StatusOr<DraftResult> draft_impl(StreamState& s, int32_t next);

  std::shared_ptr<const family::Model> model_;
  family::ModelPlan base_;  // the model's config
  family::ModelPlan cfg_;   // base_, or its unquantized form
  bool drafter_ = false;
  OracleOptions options_;
  StateGeometry geo_;
  family::ReplayShape replay_;
  std::vector<int64_t> layer_rows_;
  std::vector<float> freqs_plain_, freqs_yarn_;
  std::unique_ptr<ThreadPool> pool_;
  std::map<int32_t, StreamState> streams_;
  int32_t next_id_ = 0;
  mutable std::mutex mu_;
};

}  // namespace dsv4::cpu
