// The attention's per-call device tables (begin_attention_call, attention.cc) and their host copies, shared
// with the bounded-replay tables built from them (attention_rows.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cuda/kernels/attention/attention_kernels.cuh"

namespace dsv4::cuda {

// Device tables of one call, in c.scratch or the call's metadata: per (layer, piece) cache pointers, the
// piece of every row, and per compression ratio the groups this call completes.
struct AttentionCallTables {
  int64_t n_pieces = 0;
  int64_t stride = 0;             // entries per layer in `pieces`: n_pieces, or rows (CallCtx::fixed_layout)
  PieceDev* pieces = nullptr;     // device [n_layers, stride]
  int32_t* row_piece = nullptr;   // device [rows]
  EmitDev* emit[3] = {};          // device, by ratio (1, 2)
  int64_t n_emit[3] = {};
  int64_t max_lc[3] = {};         // by ratio: max over rows of (p + 1) / ratio
  int64_t cap = 0;                // ring capacity of every stream of the call
  std::vector<uint8_t> staging;   // host image of the tables
  std::vector<PieceDev> host_pieces;  // host copy of `pieces` [n_layers, stride]
};

}  // namespace dsv4::cuda
