// The tensor-parallel split of a DeepSeek-V4 family checkpoint as data: which slice of each tensor a rank holds.
//
// The plan (docs/fabric.md "The split"):
// - Attention: the H query heads split evenly (wq_b rows, attn_sink); the grouped low-rank projection wo_a
//   splits by group (rows) so a rank's groups read exactly its heads. The groups' outputs are gathered in rank
//   order (= group order) and wo_b stays whole on every rank, so wo_b sums its whole K in one order exactly as on
//   one GPU (a column cut of wo_b would round each rank's partial to bf16 before a rank sum: measured outside
//   the whole-model gate, docs/fabric.md). The MQA latent (wkv, kv_norm), wq_a/q_norm, the compressor and the
//   indexer are replicated: every rank computes the same KV rows and index scores with the same kernels,
//   so every rank selects identical top-k rows with no exchange.
// - Routed experts: either expert_parallel (whole experts per rank; every (row, expert) output is gathered to
//   every rank and combined in ascending expert order as on one GPU) or tp_intermediate (every expert's
//   intermediate width split: w1/w3 rows, w2 columns; partial outputs summed in rank order, which rounds each
//   partial first). The tensor-parallel forward runs expert_parallel (exact; measured docs/fabric.md
//   "Choosing the expert split"); tp_intermediate stays as data for the measurement.
//   Shared expert and router: replicated.
// - Embedding and head split by vocabulary rows: a token's embedding row comes from its owner (a copy);
//   head logits are all-gathered in rank order (= vocabulary order), so every rank samples the same full
//   row with the keyed sampler and draws the same token.
// - Norms, mHC mixes, DSpark main_proj/confidence, Engram projections: replicated. Engram tables: one copy
//   per host (host memory), read by every rank.
// Every split boundary falls on a quantization block (FP8 weight tiles, FP4 scale groups of 32 along K).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "family/deepseek_v41/config.h"
#include "family/deepseek_v41/tensors.h"

namespace dsv4::fabric {

enum class ExpertSplit : uint8_t { tp_intermediate, expert_parallel };
const char* expert_split_name(ExpertSplit s);

enum class SplitKind : uint8_t {
  replicated,  // every rank holds all of it
  split,       // dimension `dim` cut into per-rank ranges [begin, end)
  owned,       // exactly one rank holds all of it (expert-parallel experts)
  host,        // one copy per host in host memory (Engram tables), read by every rank
};
const char* split_kind_name(SplitKind k);

// Why a tensor is split the way it is (also decides which reduction follows it).
enum class SplitReason : uint8_t {
  replicated,     // small or needed whole everywhere
  heads,          // query heads
  out_groups,     // grouped output projection groups (wo_a rows, wo_b columns)
  intermediate,   // expert / shared-expert intermediate width
  experts,        // whole experts (expert_parallel)
  vocab,          // embedding / head rows
  host_table,     // Engram table
};

struct Slice {
  int64_t begin = 0, end = 0;  // along the split dim, in stored elements (packed FP4 bytes for FP4 weights)
  bool holds() const { return end > begin; }
};

struct TensorSplit {
  std::string name;
  SplitKind kind = SplitKind::replicated;
  SplitReason reason = SplitReason::replicated;
  int32_t dim = -1;              // split: the dimension cut
  std::vector<Slice> ranks;      // [tp]: split: the range; owned: whole range on the owner, empty elsewhere;
                                 // replicated/host: whole dim-0 range on every rank
};

struct SplitPlan {
  int32_t tp = 1;
  ExpertSplit experts = ExpertSplit::tp_intermediate;
  std::vector<TensorSplit> tensors;  // same order as the tensor table
};

// The plan for `tp` ranks (1, 2, 4, 8 for the released models). Refused (invalid_argument, naming the
// first dimension that does not divide or would cut a quantization block) when the model cannot split so.
StatusOr<SplitPlan> make_split_plan(const family::Config& config, const family::TensorTable& table, int32_t tp,
                                    ExpertSplit experts);

// Bytes rank `rank` holds in device memory (host tables excluded).
int64_t rank_device_bytes(const SplitPlan& plan, const family::TensorTable& table, int32_t rank);

}  // namespace dsv4::fabric
