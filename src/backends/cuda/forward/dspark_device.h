// The DSpark drafter on the device (model-spec.md §3.9, cpu/dspark.h): ring seeding from the
// target layers' taps for every main position, and the 3-stage draft of one block with the Markov
// head and the confidence head.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/stream_forward.h"
#include "backends/cuda/forward/call.h"
#include "backends/cuda/forward/forward_block.h"
#include "backends/cuda/model/model.h"
#include "core/status.h"

namespace dsv4::cuda {

class StreamCaches;

// Scratch bytes of one draft (the forward reserves them besides a call's own).
int64_t dspark_scratch_bytes(const family::ModelPlan& cfg);

// taps bf16 [rows, n_taps, D]: every stage's ring receives the packed key of each row of each
// piece (the last ring_capacity rows of a piece), at slot position % ring_capacity.
Status dspark_write_rings(OpCtx& c, const ModelDevice& M, const std::vector<DevicePiece>& pieces,
                          const int64_t* pos, int64_t rows, const float* taps);

// Drafts dspark_block tokens after the stream's last position p given `next` (token at p + 1).
StatusOr<engine::DraftResult> dspark_draft(OpCtx& c, const ModelDevice& M, const StreamCaches& caches, int32_t next);

}  // namespace dsv4::cuda
