// The lane core's Backend over the CPU oracle (backends/cpu/forward.h): streams, prompt pieces,
// verify windows drawn with the keyed sampler, rollback, snapshots. No drafting (depth 0): every
// window is the pending row alone or with forced tokens.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backends/cpu/forward.h"
#include "lanes/backend.h"

namespace dsv4::cli {

struct OracleBackendOptions {
  std::string model_id;           // names the weights (prompt-cache entries of others are refused)
  std::vector<lanes::TokenId> eos_ids;
  int64_t max_context = 4096;
  int32_t max_streams = 4;
};

class OracleBackend final : public lanes::Backend {
 public:
  OracleBackend(std::unique_ptr<cpu::Oracle> oracle, OracleBackendOptions options);

  const lanes::BackendInfo& info() const override { return info_; }
  int64_t stream_bytes(int64_t rows) const override { return rows; }
  Status open(lanes::StreamId stream, const lanes::StreamSpec& spec) override;
  Status prefill(std::span<const lanes::Piece> pieces) override;
  Status verify(std::span<const lanes::Window> windows,
                std::vector<std::vector<lanes::RowResult>>* out) override;
  Status keep(lanes::StreamId stream, int64_t rows) override;
  Status draft(std::span<const lanes::DraftRequest> requests,
               std::vector<lanes::DraftProposal>* out) override;
  StatusOr<std::vector<uint8_t>> snapshot(lanes::StreamId stream) override;
  Status restore(lanes::StreamId stream, std::span<const uint8_t> bytes, int64_t rows) override;
  void release(lanes::StreamId stream) override;

 private:
  struct Open {
    int32_t oracle_stream = 0;
    lanes::StreamSpec spec;
  };
  StatusOr<Open*> find(lanes::StreamId stream);

  std::unique_ptr<cpu::Oracle> oracle_;
  lanes::BackendInfo info_;
  std::map<lanes::StreamId, Open> streams_;
};

}  // namespace dsv4::cli
