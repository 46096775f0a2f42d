// check_fits: one error naming every shortfall and what each flag would change (see memory_plan.h).
#include <algorithm>

#include "engine/byte_size.h"
#include "engine/memory_plan.h"
#include "engine/pack_estimate.h"

namespace dsv4::engine {

namespace {

std::string verdict(int64_t need, int64_t have) {
  return need <= have ? "fits" : fmt::format("short {}", format_gib(need - have));
}

std::string rank_parts(const RankMemory& r) {
  return fmt::format("weights {}, caches {}, scratch {}, runtime {}, margin {}", format_gib(r.weights),
                     format_gib(r.caches), format_gib(r.scratch), format_gib(r.runtime), format_gib(r.margin));
}

// "GPU 0 needs ..." per short rank; consecutive ranks with the same need (to the MiB) share a line.
std::vector<std::string> device_shortfalls(const MemoryPlan& p) {
  std::vector<std::string> out;
  const int64_t have = p.inputs.device_memory;
  for (size_t i = 0; i < p.ranks.size();) {
    const RankMemory& r = p.ranks[i];
    size_t j = i + 1;
    while (j < p.ranks.size() && p.ranks[j].need() >> 20 == r.need() >> 20) ++j;
    if (r.need() > have) {
      const bool one = j - i == 1;
      const std::string who = one ? fmt::format("GPU {} needs", i) : fmt::format("GPUs {}-{} each need", i, j - 1);
      out.push_back(fmt::format("{} {} ({}), {} {} ({})", who, format_gib(r.need()), rank_parts(r),
                                one ? "has" : "each has", format_gib(have), verdict(r.need(), have)));
    }
    i = j;
  }
  return out;
}

std::string host_shortfall(const MemoryPlan& p) {
  const HostMemory& h = p.host;
  return fmt::format("host needs {} (Engram tables {} {}, staging {}, runtime {}, token history {}, prompt cache {}), "
                     "has {} ({})",
                     format_gib(h.need()), engram_placement_name(p.inputs.engram), format_gib(h.engram),
                     format_gib(h.staging), format_gib(h.runtime), format_gib(h.history), format_gib(h.prompt_cache),
                     format_gib(p.inputs.host_memory), verdict(h.need(), p.inputs.host_memory));
}

// More ranks: each tp above the current one up to 8 (the released models split over 2, 4 and 8), until one fits.
void suggest_tp(const MemoryPlan& p, std::vector<std::string>& out) {
  if (p.inputs.config.variant != family::Variant::v41) {
    out.push_back("--tp: V4-0731 runs on one GPU so far (tensor parallelism cuts V4.1 weights only)");
    return;
  }
  for (int32_t tp = p.inputs.tp * 2; tp <= 8; tp *= 2) {
    MemoryPlanInputs in = p.inputs;
    in.tp = tp;
    auto q = plan_memory(in, PlanBasis{p.basis.release, nullptr, nullptr});
    if (!q.ok()) continue;
    out.push_back(fmt::format("--tp {} would need {} per GPU ({})", tp, format_gib(q->max_rank_need()),
                              verdict(q->max_rank_need(), p.inputs.device_memory)));
    if (q->devices_fit()) return;
  }
}

// An EXL3 pack at the same tp: the widest of 4, 3, 2 bits per weight that fits, else the 2-bit one's need.
void suggest_exl3(const MemoryPlan& p, std::vector<std::string>& out) {
  if (p.inputs.exl3_pack || p.inputs.config.variant != family::Variant::v41) return;
  PlanBasis basis = p.basis;
  if (!basis.pack) {
    auto pack = family::exl3_pack_plan(p.inputs.config);
    if (!pack.ok()) return;
    basis.pack = std::make_shared<const family::Exl3PackPlan>(*std::move(pack));
  }
  int64_t need = 0;
  for (int bits : {4, 3, 2}) {
    auto tensors = exl3_pack_estimate(*basis.pack, bits);
    if (!tensors.ok()) return;
    MemoryPlanInputs in = p.inputs;
    in.tensors = *std::move(tensors);
    in.exl3_pack = true;
    auto q = plan_memory(in, basis);
    if (!q.ok()) return;
    need = q->max_rank_need();
    if (q->devices_fit() || bits == 2) {
      out.push_back(fmt::format("a {}-bit EXL3 pack (--model PACK_DIR --engram-shards RELEASE_DIR) would need {} per "
                                "GPU at --tp {} ({})",
                                bits, format_gib(need), p.inputs.tp, verdict(need, p.inputs.device_memory)));
      return;
    }
  }
}

// A smaller value of one runtime input: the largest candidate that fits, else the smallest one's saving.
template <typename Set>
void suggest_smaller(const MemoryPlan& p, const std::vector<int64_t>& candidates, const char* flag, Set set,
                     std::vector<std::string>& out) {
  const int64_t base = p.max_rank_need();
  std::string line;
  for (int64_t v : candidates) {
    MemoryPlanInputs in = p.inputs;
    set(in, v);
    auto q = replan_runtime(p, in);
    if (!q.ok()) continue;
    const int64_t saved = base - q->max_rank_need();
    line = fmt::format("{} {} would save {} per GPU ({})", flag, v, format_gib(saved),
                       verdict(q->max_rank_need(), p.inputs.device_memory));
    if (q->devices_fit()) break;
  }
  if (!line.empty()) out.push_back(line);
}

void suggest_context(const MemoryPlan& p, std::vector<std::string>& out) {
  std::vector<int64_t> c;  // powers of two below the context, down to 16 (serve --context's least)
  for (int64_t v = int64_t{1} << 40; v >= 16; v /= 2)
    if (v < p.inputs.max_context) c.push_back(v);
  suggest_smaller(p, c, "--context", [](MemoryPlanInputs& in, int64_t v) { in.max_context = v; }, out);
}

void suggest_parallel(const MemoryPlan& p, std::vector<std::string>& out) {
  std::vector<int64_t> c;
  for (int64_t v = p.inputs.parallel - 1; v >= 1; --v) c.push_back(v);
  suggest_smaller(p, c, "--parallel", [](MemoryPlanInputs& in, int64_t v) { in.parallel = static_cast<int32_t>(v); },
                  out);
}

void suggest_host(const MemoryPlan& p, std::vector<std::string>& out) {
  const int64_t have = p.inputs.host_memory;
  if (p.inputs.engram == EngramPlacement::pinned && p.share.host_engram > 0) {
    for (EngramPlacement e : {EngramPlacement::mapped, EngramPlacement::disk}) {
      MemoryPlanInputs in = p.inputs;
      in.engram = e;
      auto q = replan_runtime(p, in);
      if (!q.ok()) continue;
      out.push_back(fmt::format("--engram {} would need {} of host memory ({}){}", engram_placement_name(e),
                                format_gib(q->host.need()), verdict(q->host.need(), have),
                                e == EngramPlacement::mapped ? "; the page cache then keeps the tables' hot rows"
                                                             : "; Engram rows are then read from SSD each step"));
    }
  }
  if (p.host.prompt_cache > 0)
    out.push_back(fmt::format("--prompt-cache-mib 0 would save {} of host memory ({})", format_gib(p.host.prompt_cache),
                              verdict(p.host.need() - p.host.prompt_cache, have)));
}

}  // namespace

Status check_fits(const MemoryPlan& p) {
  if (!p.device_known() || !p.host_known())
    return error(StatusCode::invalid_argument, "memory plan: {} memory is unknown (give --gpu-memory / --host-memory)",
                 !p.device_known() ? "GPU" : "host");
  if (p.fits()) return ok_status();
  std::vector<std::string> shortfalls, fixes;
  if (!p.devices_fit()) {
    shortfalls = device_shortfalls(p);
    suggest_tp(p, fixes);
    suggest_exl3(p, fixes);
    suggest_context(p, fixes);
    suggest_parallel(p, fixes);
  }
  if (!p.host_fits()) {
    shortfalls.push_back(host_shortfall(p));
    suggest_host(p, fixes);
  }
  std::string msg = fmt::format("the model does not fit ({} at --tp {}, --context {}, --parallel {}, --engram {}):",
                                p.inputs.exl3_pack ? "EXL3 pack" : "release weights", p.inputs.tp,
                                p.inputs.max_context, p.inputs.parallel, engram_placement_name(p.inputs.engram));
  for (const std::string& s : shortfalls) msg += "\n  - " + s;
  msg += "\nwhat would change it:";
  for (const std::string& s : fixes) msg += "\n  - " + s;
  if (fixes.empty()) msg += "\n  - nothing this plan can change: a GPU or host with more memory";
  return Status(StatusCode::resource_exhausted, msg);
}

}  // namespace dsv4::engine
