// The CPU oracle behind the engine's StreamForward, and the lane backend serving it.
#pragma once

#include <memory>

#include "backends/cpu/forward.h"
#include "engine/lane_backend.h"
#include "engine/stream_forward.h"

namespace dsv4::cpu {

// The oracle behind StreamForward (with its drafter when the oracle runs one); its snapshots are split
// (the family's StateGeometry layout with fp64 projection rings, stream_state.h).
std::unique_ptr<engine::StreamForward> oracle_stream_forward(std::unique_ptr<Oracle> oracle);

// The lane backend over the oracle on `model`; refuses reference_shapes (it breaks pieces == whole).
StatusOr<std::unique_ptr<engine::LaneBackend>> oracle_lane_backend(std::shared_ptr<const family::Model> model,
                                                                   const OracleOptions& oracle,
                                                                   const engine::LaneBackendOptions& options);

}  // namespace dsv4::cpu
