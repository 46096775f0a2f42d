// What the files of tp_forward_test share: the checks (rank_process_testing.h's), the preset, and the
// scenarios each file runs on a rank (tp_forward_test.cc has the harness and main).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/forward.h"
#include "backends/cuda/forward/forward.h"
#include "fabric/control.h"
#include "fabric/nccl/nccl_comm.h"
#include "fabric/nccl/rank_process_testing.h"

namespace dsv4::fabric::tp_testing {

using testing::failures;  // and CHECK_TRUE: rank_process_testing.h

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

// One forward call; its pieces' logits concatenated (a failure counts and gives an empty vector).
std::vector<float> call(cuda::Forward& f, const std::vector<engine::Piece>& pieces,
                        std::vector<std::vector<float>>* each = nullptr);
int32_t open(cuda::Forward& f);

// Greedy decoding of n tokens after a prompt: the tokens and each token's logits row, f32 [n, V].
struct Decoded {
  std::vector<int32_t> tokens;
  std::vector<float> logits;
  int64_t drafted = 0, accepted = 0;  // draft tokens proposed / accepted (drafted decoding only)
  engine::DraftResult first_draft;       // the first block drafted (drafted decoding only)
};

// One token per call.
Decoded decode_plain(cuda::Forward& f, const std::vector<int32_t>& prompt, int n);
// DSpark rounds: draft a block after the last token, verify it with the last token in one call, keep the
// rows up to the first mismatch (the stream is truncated to them), emit their argmax tokens.
// With `proposals` set, each round still drafts but verifies the next tokens of `proposals` instead (the
// plain decoding's: every proposal is accepted), so the multi-row accept path runs whatever the drafter proposes.
Decoded decode_drafted(cuda::Forward& f, const std::vector<int32_t>& prompt, int n,
                       const std::vector<int32_t>* proposals = nullptr);

// Ten single steps after a 30-row prefill with CUDA graphs on (captured, then replayed) and off (eager):
// the logits of both, f32 [10, V] each; graphs stay on afterwards.
struct GraphRun {
  std::vector<float> graphed, eager;
  int64_t captures = 0, replays = 0;  // during the graphed steps
  double graphed_ms = 0, eager_ms = 0;  // wall time per step (each call synchronizes)
};
GraphRun graph_and_eager(cuda::Forward& f, const std::vector<int32_t>& prompt);

// Routed experts at full width, tp_intermediate vs expert_parallel (tp_moe_bench.cc).
int run_moe_bench(Control& control, const std::shared_ptr<NcclComm>& comm);

}  // namespace dsv4::fabric::tp_testing
