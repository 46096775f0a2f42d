// The DSpark drafter on the device (model-spec.md §3.9, cpu/dspark.h): ring seeding from the
// target layers' taps for every main position, and the 3-stage draft of one block with the Markov
// head and the confidence head, for any number of streams in one pass of launches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
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

// One stream's draft: its caches (positions [0, p] with p = length() - 1 > -1) and `next`, the token at p + 1.
struct DraftStream {
  const StreamCaches* caches = nullptr;
  int32_t next = 0;
};

// Pinned host bytes one group of n drafts stages its inputs in and receives its results into (logits: with every
// draft row's logits, f32 [n * dspark_block, V]).
size_t dspark_draft_host_bytes(const family::ModelPlan& cfg, int64_t n, bool logits);

// Streams one group may hold within `bytes` of scratch on one of `world` tensor-parallel ranks (1: one GPU); at
// least 1 (one draft always fits the forward's reserve).
int64_t dspark_group_streams(const family::ModelPlan& cfg, int64_t bytes, int32_t world);

// Enqueues the drafts of dspark_block tokens after each stream's `next` on c.stream, every stream of `group` in one
// pass: one upload of the group's tables from `host`, each stage's launches over all n * dspark_block rows, the head
// once, the Markov chain one step for every stream per launch, the confidence head once, and the copy of the results
// into `host` (pinned, dspark_draft_host_bytes(cfg, n, logits); untouched by the caller until it has synchronized
// c.stream). No synchronization. Every kernel computes each row alike whatever the row count, so a stream's draft is
// bit for bit the same alone or in any group.
Status dspark_draft_enqueue(OpCtx& c, const ModelDevice& M, std::span<const DraftStream> group, bool logits,
                            uint8_t* host);

// The results of a group of n enqueued with `host`, read after the synchronization: one DraftResult per stream, in
// order, appended to *out (logits filled when `logits`).
void dspark_draft_results(const family::ModelPlan& cfg, int64_t n, bool logits, const uint8_t* host,
                          std::vector<engine::DraftResult>* out);

}  // namespace dsv4::cuda
