// --backend selection (see backend_choice.h).
#include "cli/backend_choice.h"

#ifdef DSV4_WITH_CUDA
#include "backends/cuda/device_info.h"
#include "backends/cuda/forward.h"
#include "backends/cuda/model.h"
#endif

namespace dsv4::cli {

StatusOr<std::unique_ptr<cpu::StreamForward>> make_stream_forward(const BackendChoice& choice,
                                                                  std::shared_ptr<const family::Model> model,
                                                                  const cpu::OracleOptions& oracle) {
  if (choice.name == "cpu") {
    cpu::OracleOptions o = oracle;
    o.max_rollback = choice.max_rollback;
    DSV4_ASSIGN_OR_RETURN(std::unique_ptr<cpu::Oracle> f, cpu::Oracle::create(std::move(model), o));
    return cpu::oracle_stream_forward(std::move(f));
  }
  if (choice.name != "cuda")
    return error(StatusCode::invalid_argument, "unknown backend '{}' (cpu or cuda)", choice.name);
#ifdef DSV4_WITH_CUDA
  if (oracle.precision == cpu::Precision::ref64)
    return error(StatusCode::invalid_argument, "ref64 (double accumulation) is the CPU oracle's; the CUDA backend is ref32");
  if (cuda::list_devices().empty()) return error(StatusCode::unavailable, "--backend cuda: no CUDA device is visible");
  cuda::ModelDeviceOptions mo;
  mo.device = choice.device;
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<cuda::ModelDevice> m, cuda::ModelDevice::upload(model, mo));
  cuda::ForwardOptions fo;
  fo.collective = choice.collective;
  fo.max_context = choice.max_context;
  fo.max_rollback = choice.max_rollback;
  fo.max_call_rows = choice.max_call_rows;
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<cuda::Forward> f,
                        cuda::Forward::create(std::shared_ptr<const cuda::ModelDevice>(std::move(m)), fo));
  return cuda::cuda_stream_forward(std::move(f));
#else
  return error(StatusCode::unimplemented, "--backend cuda: this dsv4 was built without the CUDA backend");
#endif
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
