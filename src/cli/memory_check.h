// The memory plan checked before a CUDA load (serve, run): device and host memory asked of the machine (or
// given by flags), the plan printed, and one refusal naming the shortfall and the flags that would change it.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/memory_plan.h"
#include "family/deepseek_v41/model.h"

namespace dsv4::cli {

struct MemoryFlags {
  std::string gpu_memory;        // empty: the smallest visible GPU's memory
  std::string host_memory;       // empty: MemAvailable of /proc/meminfo
  std::string engram = "mapped"; // pinned | mapped | disk
};

// --gpu-memory, --host-memory, --engram (serve and run on --backend cuda).
void add_memory_flags(CLI::App& app, MemoryFlags& f);

// Bytes per GPU: `flag` parsed, else the smallest visible GPU's memory (CUDA builds), else an error asking for it.
StatusOr<int64_t> gpu_memory_bytes(const std::string& flag);
// Host memory: `flag` parsed, else MemAvailable.
StatusOr<int64_t> host_memory_bytes(const std::string& flag);
// An EXL3 pack's stored tensors in `dir`, plus the release's Engram tables of `c` (read from the release shards).
StatusOr<std::vector<engine::StoredTensor>> pack_tensors(const std::string& dir, const family::Config& c);

struct ServeShape {
  int32_t tp = 1;
  int64_t context = 4096;
  int32_t parallel = 4;
  int64_t kv_pool_tokens = 0;  // positions the KV pool holds for all streams; 0: every stream at its full context
  int64_t call_rows = 4096;
  bool drafter = true;
  int64_t prompt_cache_bytes = 0;
  bool vision_tower = false;  // the device vision tower on GPU 0 (its weights and one image's scratch)
};

// Plans serving `m` (the whole model) on `shape`, prints the plan to `out`, and refuses (resource_exhausted, the
// shortfall and what each flag would change) when it does not fit. Nothing is allocated.
Status check_memory(const family::Model& m, const ServeShape& shape, const MemoryFlags& f, std::FILE* out);

}  // namespace dsv4::cli
