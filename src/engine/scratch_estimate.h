// Device scratch of one rank's forward for calls of up to `rows` rows: activations, attention work, gathers.
//
// The CUDA backend sizes one scratch arena at start (backends/cuda/forward/forward.cc Forward::create) as the sum of
// the terms below; this is the same arithmetic over the family config, so the plan can be made with no GPU
// and no CUDA build. It mirrors, as of the commit that added it (update both together):
// - forward: forward.cc forward_scratch_bytes: fp32 per-row buffers of the block loop (4 hyper-connection
//   streams, taps, mixes), the larger of the MoE (router scores, the K chosen experts' [D + 3I] rows) and
//   Engram (gathered rows) work, or the head's (rows x vocab logits), plus 64 MiB;
// - attention: attention.cc attention_scratch_bytes (+ attention_v4.cc's V4 extra): per call the piece
//   tables and top-k lists; per layer fp32 query, latent and output rows of this rank's heads and groups,
//   the index scores rows x (max_context + 1) fp32 and their mask bytes, top-k chunk work (rows x 16 x k
//   past 8,192 scores), candidate block keys; V4 adds every visible compressed row per row (ratio-128 layers);
// - drafter: dspark_device.cc dspark_scratch_bytes (a few MiB; the CUDA forward sizes it always);
// - tensor parallel: Forward::create's gathers at tp > 1 (the head's rows x vocab logits, every (row, expert)
//   output from every rank, the output groups, the residual rows), plus 4 MiB;
// - call metadata (call_meta.cc: one piece record per layer and row) and, for EXL3 packs, the EXL3
//   linears' scratch (exl3_view.h: at least 64 MiB per CUDA stream, the forward's and its side stream), or, for
//   FP8 / FP4 weights and calls of more than 16 rows, the many-row GEMM's pooled quantized rows (lowp_gemm.cu:
//   256 MiB kept; outside the arena).
// Rows x context is the term that grows fastest: 4,096 rows at 1M positions is 16 GiB of index scores.
#pragma once

#include <cstdint>

#include "family/deepseek_v41/config.h"

namespace dsv4::engine {

struct ScratchEstimate {
  int64_t forward = 0;
  int64_t attention = 0;
  int64_t drafter = 0;
  int64_t tensor_parallel = 0;
  int64_t other = 0;  // call metadata, EXL3 scratch
  int64_t total() const { return forward + attention + drafter + tensor_parallel + other; }
};

// One rank of `tp` (its config holds heads / tp and o_groups / tp; experts and vocabulary stay whole).
ScratchEstimate estimate_scratch(const family::Config& c, int32_t tp, int64_t rows, int64_t max_context, bool exl3);

}  // namespace dsv4::engine
