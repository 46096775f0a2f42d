// Host glue of the forward's sub-layers on the device: one block (mHC mixes, collapse, RMSNorm,
// attention, expand; then the MoE sub-layer), the MoE (router, grouped routed experts, FP8 shared
// expert, ascending combine), Engram, and the head. Shapes and rounding points as cpu/block.h,
// moe.h, engram.h and head.h; temporaries from the call's scratch arena.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "family/deepseek_v41/layer_plan.h"
#include "backends/cuda/runtime/arena.h"
#include "backends/cuda/runtime/check.h"
#include "backends/cuda/model/model.h"
#include "backends/cuda/runtime/side_stream.h"
#include "core/status.h"

namespace dsv4::cuda {

// A timed section in event mode: name and its start/end events (owned by the list's owner).
struct ProfileMark {
  const char* name = nullptr;
  cudaEvent_t start = nullptr, end = nullptr;
};

// Adds every mark's elapsed milliseconds to *profile under its name and destroys the events.
Status profile_marks_collect(std::vector<ProfileMark>& marks, std::map<std::string, double>* profile);

// A timed backbone layer (Forward::set_layer_times): its index and start/end events (owned by the list's owner).
struct LayerMark {
  int layer = -1;
  cudaEvent_t start = nullptr, end = nullptr;
};

// Appends a mark for `layer` and records its start on `s` (no synchronization).
Status layer_mark_begin(std::vector<LayerMark>& marks, int layer, cudaStream_t s);
// Records the end of the last mark on `s`.
Status layer_mark_end(std::vector<LayerMark>& marks, cudaStream_t s);
// Adds every mark's elapsed milliseconds to (*ms)[layer] (grown as needed; ms may be null) and destroys the events.
Status layer_marks_collect(std::vector<LayerMark>& marks, std::vector<double>* ms);
class Collective;  // collective.h

// What every sub-layer needs: sizes, the stream, scratch (released by the caller).
struct OpCtx {
  const family::ModelPlan* cfg = nullptr;
  cudaStream_t stream = nullptr;
  Arena* scratch = nullptr;
  // When set, every timed() section synchronizes the stream around itself and adds its
  // milliseconds under its name (per-op tables of `dsv4 bench`; off in serving); a device fault
  // is then reported with the section that raised it.
  std::map<std::string, double>* profile = nullptr;
  const int32_t* ids = nullptr;  // device int32 [rows]: the call's token ids (V4 hash-routed MoE)
  // Set by the forward: where block_forward runs a V4.1 sub-layer's mixes beside its collapse and its
  // attention or MoE (they feed only the sub-layer's expand) and the shared expert beside the routed
  // experts. Unused while a profile, marks or an op probe is set, so every section stays on one stream.
  SideStream side;
  bool side_pending = false;  // work was run beside (run_beside) and not joined yet
  // When set instead of profile: every timed() section is bracketed by two events on the stream,
  // appended here, with no synchronization (device time per op at full queue depth); the owner
  // reads them after the call's synchronization (profile_marks_collect).
  std::vector<ProfileMark>* marks = nullptr;
  // Set on a tensor-parallel rank: the routed experts and the head run this rank's share and gather the
  // rest (tp_forward.h).
  Collective* collective = nullptr;
  // Tests only: when set, op_probe() hands it named sub-layer outputs of layer `layer` (the forward
  // then runs eagerly, never captured).
  const std::function<void(int layer, const char* op, const std::vector<float>& v)>* op_probe = nullptr;
  // Benchmarks only: when set, the MoE hands it each layer's selected experts [rows, K] after the router (synchronizing).
  const std::function<void(int layer, const std::vector<int32_t>& experts)>* routing_probe = nullptr;
  int layer = -1;

  template <typename T>
  StatusOr<T*> alloc(int64_t n, std::string_view what) {
    void* p = scratch->alloc(static_cast<size_t>(n > 0 ? n : 1) * sizeof(T));
    if (!p)
      return error(StatusCode::resource_exhausted, "forward scratch full: {} needs {} bytes ({} of {} used)", what,
                   n * static_cast<int64_t>(sizeof(T)), scratch->used(), scratch->capacity());
    return static_cast<T*>(p);
  }
};

// With c.op_probe set: copies n floats at dev to the host (synchronizing) and hands them over as `op`.
Status op_probe(OpCtx& c, const char* op, const float* dev, int64_t n);

// Whether c can run work beside its stream (OpCtx::side): never while profiling or probing.
inline bool side_on(const OpCtx& c) { return c.side && !c.profile && !c.marks && !c.op_probe; }

// Enqueues f(s) (s: c on the side stream) after everything enqueued on c.stream so far, then
// ends the side's work there (end_side). The side stream runs in order: later run_beside work follows earlier.
template <typename F>
Status run_beside(OpCtx& c, const char* what, F&& f) {
  DSV4_RETURN_IF_ERROR(fork_side(c.side, c.stream, what));
  OpCtx s = c;
  s.stream = c.side.stream;
  s.side = SideStream{};
  DSV4_RETURN_IF_ERROR(f(s));
  DSV4_RETURN_IF_ERROR(end_side(c.side, what));
  c.side_pending = true;
  return ok_status();
}

// Makes c.stream wait for everything run_beside has enqueued (nothing when none is pending).
inline Status join_beside(OpCtx& c) {
  if (!c.side_pending) return ok_status();
  c.side_pending = false;
  return join_side(c.side, c.stream, "joining the side stream");
}

// Runs f (returning Status); with c.profile set, its device time lands under `name`.
template <typename F>
Status timed(OpCtx& c, const char* name, F&& f) {
  if (c.marks) {
    ProfileMark m{name};
    DSV4_RETURN_IF_ERROR(cuda_status(cudaEventCreate(&m.start), "profile event"));
    DSV4_RETURN_IF_ERROR(cuda_status(cudaEventCreate(&m.end), "profile event"));
    c.marks->push_back(m);
    DSV4_RETURN_IF_ERROR(cuda_status(cudaEventRecord(m.start, c.stream), name));
    DSV4_RETURN_IF_ERROR(f());
    return cuda_status(cudaEventRecord(m.end, c.stream), name);
  }
  if (!c.profile) return f();
  DSV4_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(c.stream), std::string("before ") + name));
  const auto t0 = std::chrono::steady_clock::now();
  DSV4_RETURN_IF_ERROR(f());
  // A fault of an asynchronous launch surfaces here, named by its section.
  DSV4_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(c.stream), name));
  (*c.profile)[name] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return ok_status();
}

// attn(x bf16 [rows, D], y bf16 [rows, D]) runs the block's attention on the normed rows.
using AttnFn = std::function<Status(const float* x, float* y)>;

// One block in place on h bf16 [rows, C, D] with the delayed pre-mix pi f32 [rows, C] (in: this
// block's collapse weights; out: the FFN pre-mix for the next block). image may be null.
Status block_forward(OpCtx& c, const LayerDevice& L, int64_t rows, const AttnFn& attn, const uint8_t* image,
                     float* h, float* pi);

// The same block with its output computed only at `kept` of its `rows` input rows (bounded replay,
// docs/replay.md): keep device int64 [kept], ascending input rows (null: every row, kept == rows). The
// attention's input is normed at every input row, attn(x [rows, D], y [kept, D]) computes the kept rows'
// outputs, everything after runs on them; h and pi leave with the kept rows at their front. A kept row's
// values do not depend on the other rows. image (per kept row) may be null.
Status block_forward_rows(OpCtx& c, const LayerDevice& L, int64_t rows, const int64_t* keep, int64_t kept,
                          const AttnFn& attn, const uint8_t* image, float* h, float* pi);

// What the MoE leaves for its combine (moe_combine / moe_combine_expand), in the call's scratch:
// routed expert outputs bf16 [rows*K, D] by pair, the shared expert bf16 [rows, D], the selection
// int32 [rows, K] and each (row, slot)'s pair index int32 [rows, K].
struct MoeOut {
  const float* routed = nullptr;
  const float* shared = nullptr;
  const int32_t* sel = nullptr;
  const int32_t* pair_of = nullptr;
  int K = 0;
};

// MoE(x bf16 [rows, D]) up to its combine: router, routed and shared experts.
Status moe_forward(OpCtx& c, const MoeDevice& M, const float* x, const uint8_t* image, int64_t rows, MoeOut& out);

// Engram of one layer on h bf16 [rows, C, D]; table_rows device int64 [rows, R].
// Engram for `rows` rows: table_rows [rows, R] index codes e4m3 [*, dim] / scales ue8m0 [*, dim / 32] (the
// pinned table itself, or the rows the host gathered for this call). image u8 [rows] (may be null): those rows'
// gate is 0 (image positions).
Status engram_forward(OpCtx& c, const EngramDevice& E, const uint8_t* codes, const uint8_t* scales,
                      const int64_t* table_rows, int64_t rows, float* h, const uint8_t* image = nullptr);

// logits f32 [n, V] = head(RMSNorm(collapse(h, pi); norm)) of rows index[0..n) (device int64);
// collapsed (optional) receives the collapsed rows bf16 [n, D].
Status head_logits(OpCtx& c, const float* norm, const F32View& head, const Bf16View& head16, const float* h, const float* pi,
                   const int64_t* index, int64_t n, float* logits, float* collapsed = nullptr);

}  // namespace dsv4::cuda
