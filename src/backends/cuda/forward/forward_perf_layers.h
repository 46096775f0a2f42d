// `dsv4 bench` by layer: which plan layers the bench builds (the first N and M of the decoder, or any set of
// plan ids closed under their sources, or one layer per role) and each built layer's prefill time per chunk at
// several cached lengths.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/forward/forward_perf.h"
#include "backends/cuda/model/model.h"
#include "core/status.h"
#include "family/deepseek_v41/layer_plan.h"
#include "family/deepseek_v41/ttft_projection.h"

namespace dsv4::cuda {

// The layers the bench builds and what they are in the full plan.
struct BenchCut {
  family::ModelPlan plan;              // what is built (bench_config: without Engram and drafter)
  std::vector<int32_t> ids;            // full-plan id of each built layer
  std::vector<std::string> roles;      // each built layer's role in the full plan (family::layer_role)
  std::vector<std::string> notes;      // lines for the report: layers added for their sources, roles not built
  bool by_layer = false;               // chosen by --layer-ids / --roles (the per-layer table runs)
};

// From the options: --layer-ids and --roles (union, closed under family::close_layer_ids), else --layers and
// --decoder-layers. Refused (invalid_argument): an id outside the plan, a decoder cut the plan lacks.
StatusOr<BenchCut> bench_cut(const ForwardBenchOptions& f);

// The per-layer prefill table: for each cached length in f.prefill_contexts (empty: 0) and each chunk in
// f.prefill, one fresh stream declared to hold the cached rows (Forward::assume_length), one chunk of rows
// after them, every layer on every row (no bounded replay), each layer's device time from events around its
// work (Forward::set_layer_times), averaged over the timed chunks after one warm-up. Each measured point is
// appended to `times` (when given) under the role of the layer as built (an Engram layer built without its
// Engram counts as its plain twin).
Status run_layer_prefill(const std::shared_ptr<const ModelDevice>& model, const BenchCut& cut,
                         const ForwardBenchOptions& f, std::FILE* out, std::vector<family::RoleTime>* times = nullptr);

// The whole plan's time to first token (family::project_ttft) for prompts of 8K, 32K and 128K tokens and
// f.ttft_prompts, at each chunk of f.prefill, without and with bounded replay, from the per-role times of
// run_layer_prefill; the full plan of f.variant supplies the layers.
void print_ttft_projection(const std::vector<family::RoleTime>& times, const ForwardBenchOptions& f, std::FILE* out);

}  // namespace dsv4::cuda
