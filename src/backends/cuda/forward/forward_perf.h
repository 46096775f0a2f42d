// The CUDA forward's benchmark (`dsv4 bench`): full-width V4.1 (or V4 / 0731) layers generated on the device;
// decode steps at several batches and contexts against the memory floor measured in the same run
// (bytes read / bandwidth of a large device-to-device copy), 6-row verify windows, prefill chunks with and
// without bounded replay (docs/replay.md) and the full model's projected with both.
#pragma once

#include <cstdint>
#include <cstdio>
#include <vector>

#include "family/deepseek_v41/layer_plan.h"
#include "core/status.h"

namespace dsv4::cuda {

struct ForwardBenchOptions {
  int layers = 4;                      // the first N layers of the full plan of `variant`
  int decoder_layers = 0;              // then the first M layers of its decoder (with_decoder_layers)
  family::Variant variant = family::Variant::v41;  // v41: DeepSeek-V4.1-Flash; v4: DeepSeek-V4-Flash-0731
  std::vector<int> batches = {1, 8, 32};
  std::vector<int64_t> contexts = {4096, 65536, 262144};
  int verify_rows = 6;
  std::vector<int64_t> prefill = {2048, 4096, 8192};
  int iters = 5;
  uint64_t seed = 1;
  // By layer (forward_perf_layers.h): plan layer ids to build instead of the first `layers` (the layers they
  // read from are added), and/or one layer per role of the plan (family::plan_roles); either adds the per-layer
  // prefill table and drops the whole-model projection.
  std::vector<int> layer_ids;
  bool roles = false;
  // Rows already cached before each chunk of the per-layer table (empty: 0); set alone, the per-layer table runs
  // on the first `layers` layers.
  std::vector<int64_t> prefill_contexts;
  // With `roles`: prompt lengths whose time to first token is projected besides 8K, 32K and 128K tokens.
  std::vector<int64_t> ttft_prompts;
};

// The full config of `variant` (V4.1 or V4 / 0731) cut to its first `layers` layers and, with decoder_layers > 0,
// the first decoder_layers layers of its decoder after them (family/deepseek_v41/with_layers.h; roles unchanged),
// without Engram and drafter (the device synthesizer generates neither).
family::ModelPlan bench_config(int layers, family::Variant variant = family::Variant::v41, int decoder_layers = 0);

// The plan of a cut config as the bench builds it: Engram and the drafter removed (the device synthesizer
// generates neither).
family::ModelPlan bench_plan(family::Config cfg);

// Bytes a decode step of `batch` streams at context L must read: the dense weights once (head included), each MoE
// layer's routed experts the step touches once (experts[l] of layer l: counted from the step's routing; empty: the
// n_active of one row) with its shared expert, and every stream's window ring, selected compressed rows and index
// keys. V4 / 0731: 128x128 FP8 blocks, 584-byte KV rows, every compressed layer's bf16 compressor (ratio 4 also its
// indexer's), every visible row of the larger ratios, hc_head.
double decode_bytes(const family::ModelPlan& c, int64_t L, int batch = 1, const std::vector<double>& experts = {});

// Runs every measurement, printing markdown tables to `out`.
Status run_forward_bench(const ForwardBenchOptions& options, std::FILE* out);

}  // namespace dsv4::cuda
