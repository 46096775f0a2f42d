// plan_memory: the per-rank and host memory of serving a model (see memory_plan.h).
#include "engine/memory_plan.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "engine/byte_size.h"
#include "engine/vision_memory.h"
#include "family/deepseek_v41/layer_plan.h"
#include "family/deepseek_v41/state_geometry.h"
#include "family/deepseek_v41/state_pages.h"

namespace dsv4::engine {

std::string_view engram_placement_name(EngramPlacement p) {
  switch (p) {
    case EngramPlacement::pinned: return "pinned";
    case EngramPlacement::mapped: return "mapped";
    case EngramPlacement::disk: return "disk";
  }
  return "?";
}

StatusOr<EngramPlacement> parse_engram_placement(std::string_view name) {
  if (name == "pinned") return EngramPlacement::pinned;
  if (name == "mapped") return EngramPlacement::mapped;
  if (name == "disk") return EngramPlacement::disk;
  return error(StatusCode::invalid_argument, "unknown Engram placement '{}' (pinned, mapped or disk)", name);
}

int64_t MemoryPlan::max_rank_need() const {
  int64_t m = 0;
  for (const RankMemory& r : ranks) m = std::max(m, r.need());
  return m;
}

bool MemoryPlan::devices_fit() const { return device_known() && max_rank_need() <= inputs.device_memory; }

bool MemoryPlan::host_fits() const { return host_known() && host.need() <= inputs.host_memory; }

namespace {

Status check_inputs(const MemoryPlanInputs& in) {
  auto bad = [](std::string_view what, int64_t v, std::string_view range) {
    return error(StatusCode::invalid_argument, "memory plan: {} {} ({})", what, v, range);
  };
  if (in.tp < 1 || in.tp > 64) return bad("tensor-parallel size", in.tp, "1 to 64");
  if (in.ranks_per_host < 0) return bad("ranks per host", in.ranks_per_host, "0 for all, or at least 1");
  if (in.max_context < 1) return bad("context", in.max_context, "at least 1 position");
  if (in.parallel < 1) return bad("parallel streams", in.parallel, "at least 1");
  if (in.kv_pool_tokens < 0) return bad("KV pool tokens", in.kv_pool_tokens, "0 for every stream at its context, or more");
  if (in.max_rollback < 0) return bad("max rollback", in.max_rollback, "at least 0");
  if (in.max_call_rows < 1) return bad("rows per call", in.max_call_rows, "at least 1");
  if (in.staging_bytes < 0 || in.prompt_cache_bytes < 0 || in.device_memory < 0 || in.host_memory < 0)
    return error(StatusCode::invalid_argument, "memory plan: negative byte count");
  return ok_status();
}

// Everything after the weight share, from p.inputs and p.share (also what replan_runtime redoes).
void finish_plan(MemoryPlan& p) {
  const MemoryPlanInputs& inputs = p.inputs;
  const family::Config& c = inputs.config;
  const bool v41 = c.variant == family::Variant::v41;
  p.ranks.clear();
  p.notes.clear();
  p.host = HostMemory{};
  family::StateGeometryOptions go;
  go.max_context = inputs.max_context;
  go.max_rollback = inputs.max_rollback;
  go.dspark = p.drafter;
  const family::StateGeometry g = family::make_state_geometry(family::build_plan(c), go);
  // The KV pool's share of a stream at max_context (family/deepseek_v41/state_pages.h): its slab and its pages.
  const StatusOr<family::PageLayout> pages = family::page_layout(g);
  p.stream_bytes = pages.ok() ? pages->stream_bytes(inputs.max_context) : g.device_bytes();
  p.stream_ring_bytes = g.ring_bytes();
  p.stream_bytes_per_position = g.row_table_bytes(inputs.max_context, false) / inputs.max_context;
  p.scratch = estimate_scratch(c, inputs.tp, inputs.max_call_rows, inputs.max_context, inputs.exl3_pack);

  for (int32_t r = 0; r < inputs.tp; ++r) {
    RankMemory m;
    m.rank = r;
    m.weights = p.share.rank_device[static_cast<size_t>(r)];
    m.drafter_weights = p.share.rank_drafter[static_cast<size_t>(r)];
    m.caches = inputs.kv_pool_tokens > 0 && pages.ok()
                   ? int64_t{inputs.parallel} * pages->slab_bytes + pages->pages_for(inputs.kv_pool_tokens) * pages->page_bytes
                   : int64_t{inputs.parallel} * p.stream_bytes;
    m.scratch = p.scratch.total();
    if (r == 0 && inputs.vision_tower && c.vision.has_value()) {
      m.vision_weights = vision_weight_bytes(*c.vision, c.hidden_size);
      m.vision_scratch = vision_device_bytes(*c.vision, c.hidden_size) - m.vision_weights;
      m.weights += m.vision_weights;
      m.scratch += m.vision_scratch;
    }
    m.runtime = kDeviceRuntimeBytes + kGraphBytes + (inputs.tp > 1 ? kNcclBytes : 0);
    const int64_t rest = m.weights + m.caches + m.scratch + m.runtime;
    m.margin = std::max(kMinMarginBytes, static_cast<int64_t>(static_cast<double>(rest) * kMarginFraction));
    p.ranks.push_back(m);
  }

  const int64_t local = inputs.ranks_per_host > 0 ? std::min(inputs.ranks_per_host, inputs.tp) : inputs.tp;
  HostMemory& h = p.host;
  if (inputs.engram == EngramPlacement::pinned) h.engram = p.share.host_engram;
  if (inputs.engram == EngramPlacement::mapped) h.engram_page_cache = p.share.host_engram;
  h.staging = local * inputs.staging_bytes;
  h.runtime = local * kHostRuntimeBytes;
  h.history = local * int64_t{inputs.parallel} * inputs.max_context * static_cast<int64_t>(sizeof(int64_t));
  h.prompt_cache = inputs.prompt_cache_bytes;

  if (!p.ranks.empty() && p.ranks[0].vision_weights > 0)
    p.notes.push_back(fmt::format("vision tower on GPU 0: weights {} and one largest image's scratch {} (in its weights "
                                  "and scratch)",
                                  format_bytes(p.ranks[0].vision_weights), format_bytes(p.ranks[0].vision_scratch)));
  else if (p.share.not_loaded > 0)
    p.notes.push_back(fmt::format("not loaded: {} of vision tower and aligner (the text model does not read them)",
                                  format_bytes(p.share.not_loaded)));
  if (p.share.drafter_not_loaded > 0)
    p.notes.push_back(
        fmt::format("not loaded: {} of DSpark drafter stages", format_bytes(p.share.drafter_not_loaded)));
  if (inputs.drafter && !v41)
    p.notes.push_back("the V4-0731 drafter is not run (its forward is unconfirmed, model-spec.md §10.7): "
                      "not uploaded");
  if (!v41 && inputs.tp > 1)
    p.notes.push_back("tensor parallelism runs V4.1 weights only so far (fabric/rank_weights.h): serve refuses "
                      "V4-0731 at --tp > 1");
  if (p.share.host_engram > 0 && inputs.engram != EngramPlacement::pinned)
    p.notes.push_back(fmt::format("Engram {}: the host gathers the rows each step hashes to from the tables' files "
                                  "(each token reads 24 rows of 264 B per Engram layer)",
                                  engram_placement_name(inputs.engram)));
}

}  // namespace

StatusOr<MemoryPlan> plan_memory(const MemoryPlanInputs& inputs) { return plan_memory(inputs, PlanBasis{}); }

StatusOr<MemoryPlan> plan_memory(const MemoryPlanInputs& inputs, const PlanBasis& basis) {
  DSV4_RETURN_IF_ERROR(check_inputs(inputs));
  const family::Config& c = inputs.config;
  MemoryPlan p;
  p.inputs = inputs;
  p.basis = basis;
  if (!p.basis.release) p.basis.release = std::make_shared<const family::TensorTable>(family::expected_tensors(c));
  const family::TensorTable& release = *p.basis.release;
  if (p.inputs.tensors.empty()) {
    if (inputs.exl3_pack) return error(StatusCode::invalid_argument, "memory plan: an EXL3 pack needs its tensor list");
    p.inputs.tensors = release_tensors(release);
  }
  if (!p.basis.split || p.basis.split->tp != inputs.tp) {
    auto split = fabric::make_split_plan(c, release, inputs.tp, fabric::ExpertSplit::expert_parallel);
    if (!split.ok()) return split.status().with_context(fmt::format("--tp {}", inputs.tp));
    p.basis.split = std::make_shared<const fabric::SplitPlan>(*std::move(split));
  }
  if (inputs.exl3_pack && !p.basis.pack) {
    auto pack = family::exl3_pack_plan(c);
    if (!pack.ok()) return pack.status();
    p.basis.pack = std::make_shared<const family::Exl3PackPlan>(*std::move(pack));
  }
  const bool v41 = c.variant == family::Variant::v41;
  p.drafter = inputs.drafter && v41 && c.num_dspark_stages() > 0;
  DSV4_ASSIGN_OR_RETURN(p.share, share_weights(c, release, *p.basis.split, p.inputs.tensors,
                                               inputs.exl3_pack ? p.basis.pack.get() : nullptr, p.drafter));
  finish_plan(p);
  return p;
}

StatusOr<MemoryPlan> replan_runtime(const MemoryPlan& base, const MemoryPlanInputs& changed) {
  DSV4_RETURN_IF_ERROR(check_inputs(changed));
  MemoryPlan p = base;
  std::vector<StoredTensor> tensors = std::move(p.inputs.tensors);
  p.inputs = changed;
  p.inputs.tensors = std::move(tensors);  // the weights are base's: same tensors, tp, drafter
  p.inputs.tp = base.inputs.tp;
  p.inputs.exl3_pack = base.inputs.exl3_pack;
  p.inputs.drafter = base.inputs.drafter;
  finish_plan(p);
  return p;
}

StatusOr<int64_t> host_memory_available(const std::string& meminfo_path) {
  std::ifstream in(meminfo_path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    std::string key, unit;
    int64_t kib = 0;
    if (s >> key >> kib >> unit && key == "MemAvailable:" && unit == "kB") return kib * 1024;
  }
  return error(StatusCode::not_found, "{}: no MemAvailable line", meminfo_path);
}

}  // namespace dsv4::engine
