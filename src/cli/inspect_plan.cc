// `dsv4 inspect --plan`: memory plans for one or several --tp, each refused with what would change it.
#include "cli/inspect_plan.h"

#include "cli/memory_check.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <vector>

#include "core/checkpoint.h"
#include "engine/byte_size.h"
#include "engine/memory_plan.h"
#include "family/deepseek_v41/tensors.h"


namespace dsv4::cli {

void add_plan_flags(CLI::App& app, PlanFlags& f) {
  app.add_flag("--plan", f.plan,
               "print the memory plan (per GPU: weights, stream caches, scratch, runtime, margin; host: Engram "
               "tables, staging, prompt cache) and whether the model fits; exit 0 if it fits, 3 if not");
  app.add_option("--tp", f.tp, "with --plan: tensor-parallel GPUs (1, 2, 4 or 8); omitted: plan for each")
      ->check(CLI::Range(1, 64));
  app.add_option("--gpu-memory", f.gpu_memory,
                 "with --plan: memory per GPU, e.g. 80G (K/M/G/T = powers of 1024, KB/MB/GB/TB = of 1000); "
                 "default: the smallest visible GPU's (CUDA builds)");
  app.add_option("--host-memory", f.host_memory,
                 "with --plan: host memory to plan for (same units); default: MemAvailable of /proc/meminfo");
  app.add_option("--context", f.context, "with --plan: positions per stream, as serve --context")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 24));
  app.add_option("--parallel", f.parallel, "with --plan: streams held at once, as serve --parallel")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--kv-pool-tokens", f.kv_pool_tokens,
                 "with --plan: positions the device KV pool holds for all streams, as serve --kv-pool-tokens; "
                 "0 = --parallel x --context")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 34));
  app.add_option("--call-rows", f.call_rows, "with --plan: rows of one forward call (the prefill chunk; sizes scratch)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--engram", f.engram,
                 "with --plan: where the Engram tables live: mapped (page cache of the shards; the CUDA backend's "
                 "default), disk (read from SSD), pinned (a locked host copy, serve --engram pinned)")
      ->capture_default_str()
      ->check(CLI::IsMember({"pinned", "mapped", "disk"}));
  app.add_option("--prompt-cache-mib", f.prompt_cache_mib, "with --plan: host RAM of the prompt cache, as serve's")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  app.add_flag("--no-drafter", f.no_drafter, "with --plan: leave the DSpark drafter out (its weights and rings)");
}

namespace {

int fail(const Status& s, int code) {
  std::fprintf(stderr, "dsv4 inspect: %s\n", s.to_string().c_str());
  return code;
}

}  // namespace

int run_plan(const PlanFlags& f, const family::Config& config, const std::string& dir, bool exl3_pack) {
  auto gpu = gpu_memory_bytes(f.gpu_memory);
  if (!gpu.ok()) return fail(gpu.status(), 2);
  auto host = host_memory_bytes(f.host_memory);
  if (!host.ok()) return fail(host.status(), 2);
  engine::MemoryPlanInputs in;
  in.config = config;
  in.exl3_pack = exl3_pack;
  if (exl3_pack) {
    auto t = pack_tensors(dir, config);
    if (!t.ok()) return fail(t.status(), 1);
    in.tensors = *std::move(t);
  }
  in.max_context = f.context;
  in.parallel = f.parallel;
  in.kv_pool_tokens = f.kv_pool_tokens;
  in.max_call_rows = f.call_rows;
  in.drafter = !f.no_drafter;
  in.engram = *engine::parse_engram_placement(f.engram);
  in.prompt_cache_bytes = f.prompt_cache_mib * engine::kMiB;
  in.device_memory = *gpu;
  in.host_memory = *host;

  const std::vector<int32_t> tps = f.tp > 0 ? std::vector<int32_t>{f.tp} : std::vector<int32_t>{1, 2, 4, 8};
  std::vector<int32_t> fitting;
  std::optional<engine::MemoryPlan> largest;  // the last plan made: refused with its fixes when none fits
  for (size_t i = 0; i < tps.size(); ++i) {
    in.tp = tps[i];
    if (i > 0) std::printf("\n");
    auto p = engine::plan_memory(in);
    if (!p.ok()) {
      if (f.tp > 0) return fail(p.status(), 2);
      std::printf("--tp %d: not planned: %s\n", tps[i], p.status().message().c_str());
      continue;
    }
    std::printf("%s", engine::format_memory_plan(*p).c_str());
    if (p->fits()) fitting.push_back(tps[i]);
    largest = *std::move(p);
  }
  std::fflush(stdout);
  if (!fitting.empty()) {
    if (f.tp > 0) return 0;
    std::string list;
    for (int32_t t : fitting) list += (list.empty() ? "" : ", ") + std::to_string(t);
    std::printf("\nfits at --tp %s\n", list.c_str());
    return 0;
  }
  if (!largest) return 2;
  if (f.tp == 0) {
    std::printf("\nfits at none of --tp 1, 2, 4, 8\n");
    std::fflush(stdout);
  }
  return fail(engine::check_fits(*largest), kExitDoesNotFit);
}

}  // namespace dsv4::cli
