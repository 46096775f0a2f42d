// ModelDevice: the whole model (V4.1 or V4 / 0731) on one GPU — every weight as a device view in one arena (the
// formats of weights.h), Engram tables in pinned host memory that kernels read row by row, and
// the per-layer roles and sizes as plain host data that the forward loops over.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "family/deepseek_v41/layer_plan.h"
#include "backends/cuda/model/attention_weights.h"
#include "backends/cuda/exl3/exl3_gemm.cuh"
#include "backends/cuda/model/upload.h"
#include "backends/cuda/model/weights.h"
#include "core/staged_reader.h"
#include "core/status.h"
#include "family/deepseek_v41/engram_layout.h"
#include "family/deepseek_v41/model.h"

namespace dsv4::cuda {

class Arena;

// One sub-layer's hyper-connection parameters (cpu::HcParams).
struct HcDevice {
  F32View fn;                   // f32 [C*(C+2), C*D]
  const float* base = nullptr;  // f32 [C*(C+2)]
  float scale[3] = {};          // host copy of hc_X_scale
};

// One MoE sub-layer (cpu::MoeWeights).
struct MoeDevice {
  F32View gate;                     // [E, D] fp32 (used when gate16 is absent)
  Bf16View gate16;                  // [E, D] bf16-stored weights of the fp32 router linear
  const float* bias = nullptr;      // f32 [E]
  const float* bias_vl = nullptr;   // f32 [E] (image rows)
  const Fp4View* w1 = nullptr;      // device arrays [E] of views: w1 [I, D], w3 [I, D], w2 [D, I]
  const Fp4View* w3 = nullptr;
  const Fp4View* w2 = nullptr;
  Fp8View shared_w1, shared_w3, shared_w2;  // [I, D], [I, D], [D, I]
  Exl3ExpertsView exl3;             // an EXL3 pack's routed experts (then w1, w3, w2 are null)
  int n_active = 6;
  int64_t n_experts = 0, inter = 0;
  const int32_t* tid2eid = nullptr;  // V4 hash-routed layers: int32 [V, n_active] expert ids
};

// One Engram layer. The table stays in host memory; only the rows a step hashes to reach the device.
struct EngramDevice {
  family::EngramLayout layout;       // host: this layer's primes, offsets, multipliers (layers[0])
  int64_t table_rows = 0;
  int dim = 0;
  TensorView table, table_scale;     // mapped: e4m3 [table_rows, dim], ue8m0 [table_rows, dim / 32] on the host
  const uint8_t* codes = nullptr;    // pinned: the same, device-readable host pointers; null when mapped
  const uint8_t* scales = nullptr;
  Fp8View wkv;                       // [(C+1)*D, R*dim]
  const float* qk = nullptr;         // f32 [C, D]: q_weight * k_weight formed in float
};

// One block's weights apart from attention (ModelDevice::attention holds those, one per layer,
// contiguous: the attention call reads them as an array).
struct LayerDevice {
  HcDevice hc_attn, hc_ffn;
  const float* attn_norm = nullptr;  // bf16 [D]
  const float* ffn_norm = nullptr;   // bf16 [D]
  MoeDevice ffn;
  std::shared_ptr<const EngramDevice> engram;  // Engram layers only
};

// V4's final collapse (cpu::HcHeadWeights): pre-mix of the head from its own fn / base / scale.
struct HcHeadDevice {
  F32View fn;                   // f32 [C, C*D]
  const float* base = nullptr;  // f32 [C]
  float scale = 1.0f;
};

struct DsparkDevice {
  std::vector<AttentionDevice> attention;  // per stage: window-only attention
  std::vector<LayerDevice> stages;     // per stage: mixes, norms, MoE
  Fp8View main_proj;                   // [D, n_taps*D]
  const float* main_norm = nullptr;    // bf16 [D]
  const float* norm = nullptr;         // bf16 [D]
  const uint16_t* markov_embed = nullptr;  // bf16 [V, R]
  F32View markov_head;                 // [V, R] fp32 (used when markov_head16 is absent)
  Bf16View markov_head16;              // [V, R] bf16-stored
  F32View confidence;                  // [1, D + R]
};

// The fp32 linear of a weight kept in bf16 when its values allow (half the bytes), else in fp32.
cudaError_t f32_linear_either(const float* x, int64_t rows, const F32View& w32, const Bf16View& w16, float* y,
                              cudaStream_t s);

struct ModelDeviceOptions {
  int device = 0;
  bool dspark = true;  // upload the drafter when the weights carry one
  // Where the Engram tables (FP8, 189 GiB for V4.1-Flash) stay: in their mapped files, the rows a step hashes to
  // gathered by the host into the call's metadata (false); or a pinned, device-mapped copy the gather kernel reads
  // in place (true: no host work per step, the whole table in locked host memory).
  bool pin_engram = false;
  UploadOptions staging;  // pinned staging buffers, reader threads, progress
};

struct ModelDevice {
  // The device bytes every weight of `m` takes (the arena upload() allocates), without touching the device.
  static StatusOr<size_t> weight_bytes_of(const family::Model& m, const ModelDeviceOptions& o);
  // Uploads the stored bytes of every weight of `m` (a model or one tensor-parallel rank's slice of one)
  // through pinned staging buffers in file order; the Engram tables stay on the host (o.pin_engram). `m` must
  // outlive the ModelDevice when its Engram tables stay mapped.
  static StatusOr<std::unique_ptr<ModelDevice>> upload(std::shared_ptr<const family::Model> m,
                                                       const ModelDeviceOptions& o);
  // Full-width random weights generated on the device from `cfg` (benchmarks; no Engram, no
  // drafter): the views an upload would give, with valid finite values.
  static StatusOr<std::unique_ptr<ModelDevice>> synthesize(const family::ModelPlan& cfg, uint64_t seed, int device = 0);
  ~ModelDevice();

  family::ModelPlan config;
  const uint16_t* embed = nullptr;         // bf16 [embed_rows, D]
  int64_t embed_rows = 0;                  // V; V / tp on a tensor-parallel rank (its vocabulary range)
  std::vector<AttentionDevice> attention;  // [n_layers]
  std::vector<LayerDevice> layers;         // [n_layers]
  const float* norm = nullptr;             // bf16 [D]
  F32View head;                            // [V, D] fp32 (used when head16 is absent)
  Bf16View head16;                         // [V, D] bf16-stored head (checkpoint values are bf16)
  std::unique_ptr<DsparkDevice> dspark;    // absent: no drafter
  std::unique_ptr<HcHeadDevice> hc_head;   // V4 only
  std::vector<int32_t> engram_token_map;   // host: raw id -> compressed id [V]
  std::vector<float> freqs_plain, freqs_yarn;        // host rope frequencies [rope_dim / 2]
  const float* d_freqs_plain = nullptr;              // the same on the device
  const float* d_freqs_yarn = nullptr;

  size_t weight_bytes() const;   // bytes of the device arena in use
  size_t pinned_bytes = 0;       // bytes of pinned host memory (Engram tables)
  StageStats upload_stats;       // what the upload read, from files and memory, and its time
  std::shared_ptr<const family::Model> source;  // the stored tensors (mapped Engram tables are read per step)

  ModelDevice() = default;
  ModelDevice(const ModelDevice&) = delete;
  ModelDevice& operator=(const ModelDevice&) = delete;
  std::unique_ptr<Arena> arena;  // every device weight
  std::vector<void*> pinned;     // cudaHostAlloc'ed blocks, freed by the destructor
  std::vector<void*> registered; // cudaHostRegister'ed pages of mapped Engram tables, unregistered by it
};

}  // namespace dsv4::cuda
