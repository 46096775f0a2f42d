// Row draws on the device (engine::RowDraw): each logits row reduced to what the host needs to decide its token
// exactly — the argmax id, or the Gumbel candidates of lanes/gumbel_candidates.h (plain keyed rows) or of
// lanes/truncated_candidates.h (top-k / top-p / min-p rows) with their logits — and, for rows asking logprobs, its
// largest logit and partition sum (lanes/partition_sum.h), its best ids and a proposed id's logit; whole rows gathered
// into one contiguous block for one copy. Plain pointers and sizes.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace dsv4::cuda {

enum : int32_t { kDrawWhole = 0, kDrawArgmax = 1, kDrawGumbel = 2, kDrawTruncated = 3 };

// One row's reduction, as the host asks for it (engine::RowDraw).
struct RowDrawDev {
  int32_t kind = kDrawWhole;  // kDraw*; whole rows are skipped
  int32_t top_k = 0;          // truncated: lanes::TruncationCut::top_k (0: none)
  double temperature = 1.0;   // gumbel, truncated: lanes::keyed_temperature
  uint64_t key = 0;           // gumbel, truncated: lanes::row_key(seed, position)
  double top_p = 1.0;         // truncated: TruncationCut::top_p (1: none)
  double log_min_p = -INFINITY;  // truncated: TruncationCut::log_min_p (-inf: none)
  int32_t partition = 0;         // any kind: 1 = the row's largest logit and lanes::partition_sum (logprobs)
  int32_t top_n = 0;             // any kind: the top_n (<= kDrawTop) best ids with their logits (top_logprobs)
  int32_t proposed = -1;         // any kind: an id whose logit comes back (a proposed token's logprob); -1: none
  int32_t pad = 0;
  int64_t mask = -1;             // the row's token mask: its first word in row_draws' `masks` (a bitset over the
                                 // row, lanes::TokenMask's words); -1: none. Argmax and Gumbel rows skip the other
                                 // ids, truncated rows read their logits as -inf (draw_masked's masked copy);
                                 // the logprob parts stay those of the raw row
};

constexpr int kDrawCandidates = 32;  // lanes::kMaxGumbelCandidates (checked where both are seen)
constexpr int kDrawTop = 20;         // most top_logprobs alternatives a row asks for

// One row's result.
struct RowPickDev {
  int32_t token;      // argmax: the first id of largest logit (NaN as -inf); -1: no allowed id (it goes whole)
  int32_t count;      // gumbel: ids that met the rule; more than kDrawCandidates: only the first slots are written
  int32_t irregular;  // gumbel: the row has a NaN or infinite logit; truncated: a NaN or +inf logit, or none finite
                      // (no candidates: it goes whole)
  int32_t uncertain;  // truncated: the cut could not be placed where it matters (no candidates: it goes whole)
  int32_t ids[kDrawCandidates];       // gumbel, truncated: the candidates, in no particular order
  float logits[kDrawCandidates];      // their logits; argmax: logits[0] is the token's
  float top_logit;                    // partition: the logit of the first id of largest logit (NaN as -inf), raw
  float proposed_logit;               // proposed: its logit
  uint64_t sum_lo, sum_hi;            // partition: lanes::partition_sum of the row when top_logit is finite
  int32_t top_count;                  // top_n: ids in top_ids, best first (min(top_n, V))
  int32_t pad2;
  int32_t top_ids[kDrawTop];          // top_n: the best ids (larger logit, NaN as -inf, then lower id)
  float top_logits[kDrawTop];         // their logits
};

// A row slice's best (scratch between the two passes).
struct DrawPartDev {
  double score;
  double x;
  int64_t id;  // -1: none
  int32_t irregular;
  int32_t pad;
};

// Slices each row is cut into (the rows' work spreads over many blocks even for one row).
int64_t row_draw_slices(int64_t V);

// Device scratch bytes row_draws needs for n rows of V logits.
size_t row_draw_scratch_bytes(int64_t n, int64_t V);

// Which passes a launch needs beyond argmax and Gumbel rows (the others are not launched).
struct RowDrawPasses {
  bool truncated = false;  // some row is kDrawTruncated
  bool logprobs = false;   // some row asks partition, top_n or proposed
};

// picks[r] for every row r of logits f32 [n, V] whose draws[r] is not whole; masks: the rows' token masks (words,
// null when no row has one); scratch: row_draw_scratch_bytes(n, V) bytes, 256-byte aligned. Every row computes the
// same values whatever n is.
cudaError_t row_draws(const float* logits, int64_t n, int64_t V, const RowDrawDev* draws, const uint64_t* masks,
                      RowDrawPasses passes, void* scratch, RowPickDev* picks, cudaStream_t s);

// out f32 [n_rows, V] = logits rows rows[0..n_rows) (f32 [*, V]).
cudaError_t gather_logit_rows(const float* logits, int64_t V, const int32_t* rows, int64_t n_rows, float* out,
                              cudaStream_t s);

}  // namespace dsv4::cuda
