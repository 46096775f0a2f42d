// A host-only test backend whose logits depend on all fed history, so a rollback or position mistake changes them.
//
// State per stream: h[p], a SplitMix64 chain over (position, token) of every fed row. The logits of the row at
// position p are a pure function of h[p]; drafts follow the true keyed draws but are deliberately wrong where a
// hash bit says so, so verification both accepts and rejects. Costs advance an optional ManualClock, and every
// call is logged, so scheduling tests can assert exact call sequences and times.
//
// Split snapshots (the default): two row tables — the chain itself (one 8-byte row per position) and a group digest
// (one 8-byte row per 3 positions, a hash of the chain at the group's last position, so pages of 16 split groups) —
// and a bounded part holding the rows and the last chain state; restore checks that all three agree.
//
// With embed_dim > 0 it takes given embedding rows (Piece::embeds): such a row's chain step also mixes in its
// values and image flag (embed_mix), so a row fed with other values, or as a token, changes every later logit.
#pragma once

#include <map>
#include <span>
#include <vector>

#include "lanes/backend.h"
#include "lanes/clock.h"

namespace dsv4::lanes {

struct FakeBackendOptions {
  int32_t vocab_size = 61;
  std::vector<TokenId> eos_ids = {0};
  int64_t max_context = 4096;
  int32_t max_streams = 8;
  int64_t bytes_per_row = 16;             // stream_bytes(rows) = bytes_per_row * rows
  int64_t memory_budget_bytes = 1 << 20;
  int32_t max_draft_depth = 4;            // 0 = no draft head
  int32_t max_verify_rows = 64;
  int32_t max_prefill_rows = 256;
  float logit_scale = 8.0f;               // logits are uniform in [0, logit_scale) per row
  uint32_t draft_miss_mask = 3;           // a draft is wrong where (hash bits & mask) == 0 (1 in 4)
  bool split_snapshots = true;            // row tables and snapshot_parts; false = whole snapshots only
  int64_t embed_dim = 0;                  // BackendInfo::embed_dim: 0 = tokens only
  ManualClock* clock = nullptr;           // advanced by call costs when set
  int64_t call_ns = 1000;                 // fixed cost of one prefill/verify/draft call
  int64_t row_ns = 100;                   // cost per row fed
  int64_t prefill_row_ns = -1;            // cost per prompt row fed; < 0: row_ns
};

// One logged backend call.
struct FakeCall {
  enum class Kind { open, prefill, verify, draft, keep, snapshot, restore, release } kind;
  std::vector<std::pair<StreamId, int64_t>> streams;  // (stream, rows fed / kept / depth)
};

class FakeBackend final : public Backend {
 public:
  explicit FakeBackend(FakeBackendOptions options);

  const BackendInfo& info() const override { return info_; }
  int64_t stream_bytes(int64_t rows) const override { return options_.bytes_per_row * rows; }
  Status open(StreamId stream, const StreamSpec& spec) override;
  Status prefill(std::span<const Piece> pieces) override;
  Status verify(std::span<const Window> windows, std::vector<std::vector<RowResult>>* out) override;
  Status keep(StreamId stream, int64_t rows) override;
  Status draft(std::span<const DraftRequest> requests, std::vector<DraftProposal>* out) override;
  StatusOr<std::vector<uint8_t>> snapshot(StreamId stream) override;
  Status restore(StreamId stream, std::span<const uint8_t> bytes, int64_t rows) override;
  StatusOr<SnapshotParts> snapshot_parts(StreamId stream, int64_t from) override;
  Status restore_parts(StreamId stream, std::span<const uint8_t> bounded, std::span<const RowChunks> tables,
                       int64_t rows) override;
  void release(StreamId stream) override;

  // The chain step: state after feeding `token` at `position` on top of `previous` (kFakeRoot for none).
  static uint64_t chain(uint64_t previous, int64_t position, TokenId token);
  // What a given embedding row adds to its chain step: chain(...) ^ embed_mix(values, image).
  static uint64_t embed_mix(std::span<const uint16_t> values, bool image);
  static constexpr uint64_t kFakeRoot = 0x0DDC0FFEEull;
  static constexpr int32_t kGroup = 3;                  // positions per group-digest row
  static constexpr int64_t kBoundedBytes = 24;          // magic, version, rows, last chain state
  // The group digest row of a group whose last position has chain state `state`.
  static uint64_t group_digest(uint64_t state);
  // The logits of the row whose chain state is `state` (f32 [V]).
  std::vector<float> logits(uint64_t state) const;

  const std::vector<FakeCall>& calls() const { return calls_; }
  void clear_calls() { calls_.clear(); }
  int32_t open_streams() const { return static_cast<int32_t>(streams_.size()); }
  int64_t rows(StreamId stream) const;  // rows a stream holds; -1 if not open

 private:
  struct StreamState {
    StreamSpec spec;
    std::vector<uint64_t> chain;  // chain state after each fed row; size = rows held
  };
  StatusOr<StreamState*> find(StreamId stream);
  void charge(int64_t rows, int64_t row_ns);

  FakeBackendOptions options_;
  BackendInfo info_;
  std::map<StreamId, StreamState> streams_;
  std::vector<FakeCall> calls_;
};

}  // namespace dsv4::lanes
