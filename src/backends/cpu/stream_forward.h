// StreamForward: the forward API every backend offers the lane adapter (streams fed in pieces with
// logit rows, rollback, snapshots, DSpark drafts). The CPU oracle and the CUDA forward both
// satisfy it, so one lane backend (lane_backend.h) serves either.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backends/cpu/forward.h"
#include "core/status.h"

namespace dsv4::cpu {

class StreamForward {
 public:
  virtual ~StreamForward() = default;
  virtual const ModelConfig& config() const = 0;
  virtual bool has_drafter() const = 0;
  virtual uint32_t snapshot_version() const = 0;  // format of snapshot bytes; differs per backend
  virtual StatusOr<int32_t> open_stream() = 0;
  virtual Status close_stream(int32_t stream) = 0;
  virtual StatusOr<int64_t> length(int32_t stream) const = 0;
  virtual StatusOr<std::vector<PieceResult>> forward(const std::vector<Piece>& pieces) = 0;
  virtual Status truncate(int32_t stream, int64_t length) = 0;
  virtual StatusOr<std::vector<uint8_t>> snapshot(int32_t stream) const = 0;
  virtual Status restore(int32_t stream, const std::vector<uint8_t>& bytes) = 0;
  virtual StatusOr<DraftResult> draft(int32_t stream, int32_t next) = 0;
  // Split snapshots (optional; lanes::Backend::snapshot_parts): the forward's append-only row tables in a fixed order
  // (empty = whole snapshots only, and the two calls below are never made), the bounded part with each table's rows
  // from position `from`, and a state rebuilt from a bounded part and each table's rows [0, n) as chunks.
  virtual std::vector<RowTableGeometry> row_tables() const { return {}; }
  virtual StatusOr<StateParts> snapshot_parts(int32_t stream, int64_t from) const {
    (void)stream, (void)from;
    return error(StatusCode::unimplemented, "this forward keeps whole snapshots only");
  }
  virtual Status restore_parts(int32_t stream, std::span<const uint8_t> bounded,
                               std::span<const std::vector<std::span<const uint8_t>>> tables) {
    (void)stream, (void)bounded, (void)tables;
    return error(StatusCode::unimplemented, "this forward keeps whole snapshots only");
  }
};

// The oracle behind StreamForward (with its drafter when the oracle runs one).
std::unique_ptr<StreamForward> oracle_stream_forward(std::unique_ptr<Oracle> oracle);

}  // namespace dsv4::cpu
