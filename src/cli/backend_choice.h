// --backend for `dsv4 serve` and `dsv4 run`: the CPU oracle, or the CUDA forward when this build
// has the CUDA backend (a clear error otherwise). Both come as one StreamForward.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/image_encoder.h"
#include "engine/stream_forward.h"
#include "family/deepseek_v41/model.h"
#include "core/status.h"

namespace dsv4::cuda {
class Collective;  // backends/cuda/tp/collective.h
}

namespace dsv4::cli {

struct BackendChoice {
  std::string name = "cpu";       // "cpu" or "cuda"
  int64_t max_context = 65536;    // positions one stream may hold
  int64_t max_rollback = 128;
  int64_t max_call_rows = 4096;   // rows of one forward call (CUDA scratch)
  // CUDA tensor parallelism (cli/tp_cuda.h): this rank's GPU and the collectives joining the ranks;
  // the model passed to make_stream_forward is then the rank's slice.
  int device = 0;
  std::shared_ptr<cuda::Collective> collective;
  bool pin_engram = false;   // CUDA: a locked host copy of the Engram tables instead of their mapped files
  // CUDA: a fixed KV pool for kv_pool_streams streams holding kv_pool_positions positions together (0: every stream
  // at max_context); kv_pool_streams = 0: a pool that grows as streams open (cuda::ForwardOptions).
  int32_t kv_pool_streams = 0;
  int64_t kv_pool_positions = 0;
  // Hidden states (`run --dump-hidden`): each layer's streams h [rows, C, D] after it, and the named outputs of the
  // oracle's op_probe ("final_norm" as layer n_layers) on either backend; empty: none.
  std::function<void(int layer, const std::vector<float>& h)> layer_probe;
  std::function<void(int layer, const char* op, const std::vector<float>& v)> op_probe;
  // Tests (`run --dump-pre-round`, CPU oracle only): OracleOptions::pre_round_probe at pre_round_layers (all: empty).
  std::function<void(int layer, const char* name, int64_t rows, const std::vector<double>& v)> pre_round_probe;
  std::vector<int> pre_round_layers;
  std::string log_prefix;    // CUDA: load progress and its rate go to stderr with this prefix; empty: silent
  // The CPU oracle's settings: double accumulation (ref64), worker threads (0: hardware concurrency), and the
  // reference's call shapes (comparisons with the reference only).
  bool ref64 = false;
  int threads = 0;
  bool reference_shapes = false;
};

// The chosen forward on `model`.
StatusOr<std::unique_ptr<engine::StreamForward>> make_stream_forward(const BackendChoice& choice,
                                                                  std::shared_ptr<const family::Model> model);

// Benchmarks (CUDA builds): the CUDA forward on full-width V4.1 layers with synthetic weights generated on the GPU
// as `dsv4 bench` builds them (the plan's first `layers` layers and first `decoder_layers` decoder layers, without
// Engram and drafter; cuda::bench_config), no files read; the plan in *plan.
StatusOr<std::unique_ptr<engine::StreamForward>> make_synthetic_stream_forward(const BackendChoice& choice, int layers,
                                                                            int decoder_layers,
                                                                            family::ModelPlan* plan);

// The vision tower images are encoded with on `model` for the chosen backend: the CPU oracle's (ref64 when the oracle
// runs ref64) for cpu; for cuda the device tower (backends/cuda/vision/) on the backend's GPU, its weights uploaded
// here, or the oracle's on the host when the environment sets DSV4_VISION_TOWER=host. Either way the forward takes
// the rows as given embedding rows. `unavailable` ("vision tower not available: ...") when the model has no vision
// config, its vision tensors do not bind, or the device tower cannot be set up.
StatusOr<std::unique_ptr<engine::VisionTower>> make_vision_tower(const BackendChoice& choice,
                                                                 std::shared_ptr<const family::Model> model);

// Whether make_vision_tower puts the tower on the GPU (--backend cuda without DSV4_VISION_TOWER=host).
bool vision_tower_on_device(const BackendChoice& choice);

// A one-line description of the forward for logs ("CPU oracle", "CUDA (NVIDIA H200)").
std::string backend_description(const BackendChoice& choice);

}  // namespace dsv4::cli
