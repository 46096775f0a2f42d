// `dsv4 inspect --plan`: the memory plan of a checkpoint, an EXL3 pack or a preset (engine/memory_plan.h).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "family/deepseek_v41/config.h"

namespace dsv4::cli {

// Exit code when the model does not fit (documented in docs/memory.md); 0 when it fits.
inline constexpr int kExitDoesNotFit = 3;

struct PlanFlags {
  bool plan = false;
  int32_t tp = 0;  // 0: plan for 1, 2, 4 and 8
  std::string gpu_memory, host_memory;
  int64_t context = 4096;
  int32_t parallel = 4;
  int64_t kv_pool_tokens = 0;  // 0: parallel x context
  int64_t call_rows = 4096;
  std::string engram = "mapped";
  int64_t prompt_cache_mib = 256;
  bool no_drafter = false;
};

void add_plan_flags(CLI::App& app, PlanFlags& f);

// Plans `config` with the release's tensors (a preset or a release directory), or the pack's in `dir` when it
// is an EXL3 pack; prints the tables and verdicts. Returns the process exit code.
int run_plan(const PlanFlags& f, const family::Config& config, const std::string& dir, bool exl3_pack);

}  // namespace dsv4::cli
