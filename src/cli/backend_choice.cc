// --backend selection (see backend_choice.h).
#include "cli/backend_choice.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string_view>

#include "backends/cpu/oracle_forward.h"
#include "backends/cpu/vision_tower.h"

#ifdef DSV4_WITH_CUDA
#include "backends/cuda/runtime/device_info.h"
#include "backends/cuda/forward/forward.h"
#include "backends/cuda/forward/forward_perf.h"
#include "backends/cuda/model/model.h"
#include "backends/cuda/vision/vision_seam.h"
#endif

namespace dsv4::cli {

#ifdef DSV4_WITH_CUDA
namespace {

// The CUDA forward's options from the choice.
cuda::ForwardOptions forward_options(const BackendChoice& choice) {
  cuda::ForwardOptions fo;
  fo.collective = choice.collective;
  fo.max_context = choice.max_context;
  fo.max_rollback = choice.max_rollback;
  fo.max_call_rows = choice.max_call_rows;
  fo.kv_pool_streams = choice.kv_pool_streams;
  fo.kv_pool_positions = choice.kv_pool_positions;
  return fo;
}

}  // namespace
#endif

StatusOr<std::unique_ptr<engine::StreamForward>> make_stream_forward(const BackendChoice& choice,
                                                                  std::shared_ptr<const family::Model> model) {
  if (choice.name == "cpu") {
    cpu::OracleOptions o;
    o.precision = choice.ref64 ? cpu::Precision::ref64 : cpu::Precision::ref32;
    o.threads = choice.threads;
    o.reference_shapes = choice.reference_shapes;
    o.max_rollback = choice.max_rollback;
    if (choice.layer_probe) o.layer_probe = choice.layer_probe;
    if (choice.op_probe) o.op_probe = choice.op_probe;
    if (choice.pre_round_probe) o.pre_round_probe = choice.pre_round_probe;
    o.pre_round_layers = choice.pre_round_layers;
    DSV4_ASSIGN_OR_RETURN(std::unique_ptr<cpu::Oracle> f, cpu::Oracle::create(std::move(model), o));
    return cpu::oracle_stream_forward(std::move(f));
  }
  if (choice.name != "cuda")
    return error(StatusCode::invalid_argument, "unknown backend '{}' (cpu or cuda)", choice.name);
#ifdef DSV4_WITH_CUDA
  if (choice.ref64)
    return error(StatusCode::invalid_argument, "ref64 (double accumulation) is the CPU oracle's; the CUDA backend is ref32");
  if (cuda::list_devices().empty()) return error(StatusCode::unavailable, "--backend cuda: no CUDA device is visible");
  cuda::ModelDeviceOptions mo;
  mo.device = choice.device;
  mo.pin_engram = choice.pin_engram;
  const auto t0 = std::chrono::steady_clock::now();
  auto last = t0;
  std::mutex mu;
  if (!choice.log_prefix.empty())
    mo.staging.progress = [&](const StageProgress& p) {  // at most every 2 s, and the last chunk
      std::lock_guard<std::mutex> lock(mu);
      const auto now = std::chrono::steady_clock::now();
      if (now - last < std::chrono::seconds(2) && p.bytes_done != p.bytes_total) return;
      last = now;
      const double s = std::chrono::duration<double>(now - t0).count();
      std::fprintf(stderr, "%suploading weights: %.2f / %.2f GiB (%.2f GiB/s)\n", choice.log_prefix.c_str(),
                   p.bytes_done / 1073741824.0, p.bytes_total / 1073741824.0, s > 0 ? p.bytes_done / 1073741824.0 / s : 0.0);
    };
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<cuda::ModelDevice> m, cuda::ModelDevice::upload(model, mo));
  if (!choice.log_prefix.empty()) {
    const StageStats& st = m->upload_stats;
    std::fprintf(stderr,
                 "%sweights on the device: %.2f GiB; read %.2f GiB from files and %.1f MiB from memory in %.2f s "
                 "(%.2f GiB/s); Engram tables %s\n",
                 choice.log_prefix.c_str(), m->weight_bytes() / 1073741824.0, st.file_bytes / 1073741824.0,
                 st.memory_bytes / 1048576.0, st.seconds, st.seconds > 0 ? st.file_bytes / 1073741824.0 / st.seconds : 0.0,
                 choice.pin_engram ? "pinned in host memory" : "read from their files per step");
  }
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<cuda::Forward> f,
                        cuda::Forward::create(std::shared_ptr<const cuda::ModelDevice>(std::move(m)),
                                              forward_options(choice)));
  if (choice.layer_probe) f->set_layer_probe(choice.layer_probe);
  if (choice.op_probe) f->set_op_probe(choice.op_probe);
  return cuda::cuda_stream_forward(std::move(f));
#else
  return error(StatusCode::unimplemented, "--backend cuda: this dsv4 was built without the CUDA backend");
#endif
}

StatusOr<std::unique_ptr<engine::StreamForward>> make_synthetic_stream_forward(const BackendChoice& choice, int layers,
                                                                            int decoder_layers,
                                                                            family::ModelPlan* plan) {
#ifdef DSV4_WITH_CUDA
  if (cuda::list_devices().empty()) return error(StatusCode::unavailable, "synthetic layers: no CUDA device is visible");
  *plan = cuda::bench_config(layers, family::Variant::v41, decoder_layers);
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<cuda::ModelDevice> m, cuda::ModelDevice::synthesize(*plan, 0, choice.device));
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<cuda::Forward> f,
                        cuda::Forward::create(std::shared_ptr<const cuda::ModelDevice>(std::move(m)),
                                              forward_options(choice)));
  return cuda::cuda_stream_forward(std::move(f));
#else
  (void)choice, (void)layers, (void)decoder_layers, (void)plan;
  return error(StatusCode::unimplemented, "synthetic layers need the CUDA backend; this dsv4 was built without it");
#endif
}

bool vision_tower_on_device(const BackendChoice& choice) {
#ifdef DSV4_WITH_CUDA
  // DSV4_VISION_TOWER=host keeps the oracle's tower on the host under --backend cuda (comparisons and tests).
  const char* where = std::getenv("DSV4_VISION_TOWER");
  return choice.name == "cuda" && !(where != nullptr && std::string_view(where) == "host");
#else
  (void)choice;
  return false;
#endif
}

StatusOr<std::unique_ptr<engine::VisionTower>> make_vision_tower(const BackendChoice& choice,
                                                                 std::shared_ptr<const family::Model> model) {
  const bool oracle = choice.name == "cpu";
#ifdef DSV4_WITH_CUDA
  if (vision_tower_on_device(choice)) return cuda::make_vision_tower(*model, choice.device);
#endif
  return cpu::make_vision_tower(std::move(model), oracle && choice.ref64 ? cpu::Precision::ref64 : cpu::Precision::ref32,
                                oracle ? choice.threads : 0);
}

std::string backend_description(const BackendChoice& choice) {
#ifdef DSV4_WITH_CUDA
  if (choice.name == "cuda") {
    auto d = cuda::list_devices();
    return "CUDA (" + (d.empty() ? std::string("no device") : d[0].name) + ")";
  }
#endif
  return choice.name == "cpu" ? "CPU oracle" : choice.name;
}

}  // namespace dsv4::cli
