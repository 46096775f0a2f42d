// The CPU oracle behind StreamForward (see oracle_forward.h).
#include "backends/cpu/oracle_forward.h"

namespace dsv4::cpu {

namespace {

class OracleForward final : public engine::StreamForward {
 public:
  explicit OracleForward(std::unique_ptr<Oracle> o) : o_(std::move(o)), drafter_(o_->has_drafter()) {}
  const family::ModelPlan& config() const override { return o_->config(); }
  bool has_drafter() const override { return drafter_; }
  uint32_t snapshot_version() const override { return 2; }  // split snapshots (stream_state.h); 1 was whole
  int64_t embed_dim() const override { return o_->config().dim; }
  StatusOr<int32_t> open_stream() override { return o_->open_stream(); }
  Status close_stream(int32_t s) override { return o_->close_stream(s); }
  StatusOr<int64_t> length(int32_t s) const override { return o_->length(s); }
  StatusOr<std::vector<PieceResult>> forward(const std::vector<Piece>& p) override { return o_->forward(p); }
  Status truncate(int32_t s, int64_t n) override { return o_->truncate(s, n); }
  StatusOr<std::vector<uint8_t>> snapshot(int32_t s) const override { return o_->snapshot(s); }
  Status restore(int32_t s, const std::vector<uint8_t>& b) override { return o_->restore(s, b); }
  StatusOr<DraftResult> draft(int32_t s, int32_t next) override { return o_->draft(s, next); }
  std::vector<family::RowTableShape> row_tables() const override { return o_->geometry().row_tables(); }
  StatusOr<StateParts> snapshot_parts(int32_t s, int64_t from) const override { return o_->snapshot_parts(s, from); }
  Status restore_parts(int32_t s, std::span<const uint8_t> bounded,
                       std::span<const std::vector<std::span<const uint8_t>>> tables) override {
    return o_->restore_parts(s, bounded, tables);
  }

 private:
  std::unique_ptr<Oracle> o_;
  bool drafter_;
};

}  // namespace

std::unique_ptr<engine::StreamForward> oracle_stream_forward(std::unique_ptr<Oracle> oracle) {
  return std::make_unique<OracleForward>(std::move(oracle));
}

StatusOr<std::unique_ptr<engine::LaneBackend>> oracle_lane_backend(std::shared_ptr<const family::Model> model,
                                                                   const OracleOptions& oracle,
                                                                   const engine::LaneBackendOptions& options) {
  if (oracle.reference_shapes)
    return error(StatusCode::invalid_argument, "the lane backend needs exact pieces; reference_shapes is off-contract");
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<Oracle> o, Oracle::create(std::move(model), oracle));
  return engine::LaneBackend::create(oracle_stream_forward(std::move(o)), oracle.max_rollback, options);
}

}  // namespace dsv4::cpu
