// Memory plan checks before a CUDA load (see memory_check.h).
#include "cli/memory_check.h"

#include <algorithm>

#include "core/checkpoint.h"
#include "engine/byte_size.h"
#include "family/deepseek_v41/tensors.h"

#ifdef DSV4_WITH_CUDA
#include "backends/cuda/runtime/device_info.h"
#endif

namespace dsv4::cli {

void add_memory_flags(CLI::App& app, MemoryFlags& f) {
  app.add_option("--gpu-memory", f.gpu_memory,
                 "--backend cuda: memory per GPU to plan for, e.g. 80G (K/M/G/T = powers of 1024, KB/MB/GB/TB = of "
                 "1000); default: the smallest visible GPU's");
  app.add_option("--host-memory", f.host_memory,
                 "--backend cuda: host memory to plan for (same units); default: MemAvailable of /proc/meminfo");
  app.add_option("--engram", f.engram,
                 "--backend cuda: where the Engram tables stay: mapped (their files' pages, the rows a step hashes "
                 "to gathered on the host; no locked memory), disk (the same, planned without page cache), pinned "
                 "(a locked host copy the GPU reads in place: 189 GiB for V4.1-Flash)")
      ->capture_default_str()
      ->check(CLI::IsMember({"pinned", "mapped", "disk"}));
}

StatusOr<int64_t> gpu_memory_bytes(const std::string& flag) {
  if (!flag.empty()) return engine::parse_byte_size(flag);
#ifdef DSV4_WITH_CUDA
  const std::vector<cuda::DeviceInfo> devices = cuda::list_devices();
  if (!devices.empty()) {
    int64_t least = devices[0].memory_bytes;
    for (const cuda::DeviceInfo& d : devices) least = std::min(least, d.memory_bytes);
    return least;
  }
  return error(StatusCode::invalid_argument, "no CUDA device is visible: give --gpu-memory SIZE (e.g. 80G)");
#else
  return error(StatusCode::invalid_argument, "this dsv4 has no CUDA backend to ask: give --gpu-memory SIZE (e.g. 80G)");
#endif
}

StatusOr<int64_t> host_memory_bytes(const std::string& flag) {
  if (!flag.empty()) return engine::parse_byte_size(flag);
  auto m = engine::host_memory_available();
  if (!m.ok()) return m.status().with_context("give --host-memory SIZE");
  return m;
}

StatusOr<std::vector<engine::StoredTensor>> pack_tensors(const std::string& dir, const family::Config& c) {
  DSV4_ASSIGN_OR_RETURN(Checkpoint ck, Checkpoint::open(dir));
  std::vector<engine::StoredTensor> out;
  for (const std::string& n : ck.names()) {
    DSV4_ASSIGN_OR_RETURN(TensorView v, ck.tensor(n));
    out.push_back({n, v.nbytes});
  }
  for (const family::TensorSpec& t : family::expected_tensors(c).tensors)
    if (t.role == family::TensorRole::engram_table || t.role == family::TensorRole::engram_scale)
      out.push_back({t.name, t.bytes()});
  return out;
}

Status check_memory(const family::Model& m, const ServeShape& shape, const MemoryFlags& f, std::FILE* out) {
  engine::MemoryPlanInputs in;
  in.config = m.config;
  in.exl3_pack = m.exl3_pack;
  if (m.exl3_pack) {
    DSV4_ASSIGN_OR_RETURN(in.tensors, pack_tensors(m.path, m.config));
  }
  in.tp = shape.tp;
  in.max_context = shape.context;
  in.parallel = shape.parallel;
  in.kv_pool_tokens = shape.kv_pool_tokens;
  in.max_call_rows = shape.call_rows;
  in.drafter = shape.drafter;
  in.prompt_cache_bytes = shape.prompt_cache_bytes;
  in.vision_tower = shape.vision_tower;
  DSV4_ASSIGN_OR_RETURN(in.engram, engine::parse_engram_placement(f.engram));
  DSV4_ASSIGN_OR_RETURN(in.device_memory, gpu_memory_bytes(f.gpu_memory));
  DSV4_ASSIGN_OR_RETURN(in.host_memory, host_memory_bytes(f.host_memory));
  DSV4_ASSIGN_OR_RETURN(const engine::MemoryPlan plan, engine::plan_memory(in));
  const std::string table = engine::format_memory_plan(plan);
  std::fwrite(table.data(), 1, table.size(), out);
  std::fflush(out);
  return engine::check_fits(plan);
}

}  // namespace dsv4::cli
