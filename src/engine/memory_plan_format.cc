// format_memory_plan: the plan as a table, one line per GPU plus the host (see memory_plan.h).
#include "engine/byte_size.h"
#include "engine/memory_plan.h"

namespace dsv4::engine {

namespace {

std::string gib_cell(int64_t b) { return fmt::format("{:.2f}", static_cast<double>(b) / kGiB); }

}  // namespace

std::string format_memory_plan(const MemoryPlan& p) {
  const MemoryPlanInputs& in = p.inputs;
  std::string out;
  out += fmt::format("memory plan: {} {}, {} stored bytes; --tp {}, --context {}, --parallel {}, {} rows per call, "
                     "drafter {}, Engram {}\n",
                     family::variant_name(in.config.variant), in.exl3_pack ? "EXL3 pack" : "release weights",
                     p.share.stored, in.tp, in.max_context, in.parallel, in.max_call_rows, p.drafter ? "on" : "off",
                     engram_placement_name(in.engram));
  out += fmt::format("one stream: {} of device caches ({} of rings + {} B per position)\n",
                     format_bytes(p.stream_bytes), format_bytes(p.stream_ring_bytes), p.stream_bytes_per_position);
  const ScratchEstimate& s = p.scratch;
  out += fmt::format("scratch per GPU: forward {}, attention {}, tensor-parallel gathers {}, drafter {}, other {}\n",
                     format_bytes(s.forward), format_bytes(s.attention), format_bytes(s.tensor_parallel),
                     format_bytes(s.drafter), format_bytes(s.other));
  out += fmt::format("{:<8} {:>10} {:>9} {:>9} {:>9} {:>9} {:>8} {:>10} {:>10}  {}\n", "GiB", "weights", "drafter",
                     "caches", "scratch", "runtime", "margin", "need", "has", "verdict");
  for (const RankMemory& r : p.ranks) {
    const bool known = p.device_known();
    out += fmt::format("{:<8} {:>10} {:>9} {:>9} {:>9} {:>9} {:>8} {:>10} {:>10}  {}\n", fmt::format("GPU {}", r.rank),
                       gib_cell(r.weights), gib_cell(r.drafter_weights), gib_cell(r.caches), gib_cell(r.scratch),
                       gib_cell(r.runtime), gib_cell(r.margin), gib_cell(r.need()),
                       known ? gib_cell(in.device_memory) : "?",
                       !known ? "unknown" : r.need() <= in.device_memory ? "fits" : "SHORT");
  }
  out += fmt::format("{:<8} (drafter: the DSpark stages' part of weights; runtime: CUDA context and kernels {}, "
                     "graphs {}{}; margin: {:g}%, at least {})\n",
                     "", format_bytes(kDeviceRuntimeBytes), format_bytes(kGraphBytes),
                     in.tp > 1 ? ", NCCL " + format_bytes(kNcclBytes) : std::string(), kMarginFraction * 100,
                     format_bytes(kMinMarginBytes));
  const HostMemory& h = p.host;
  out += fmt::format("{:<8} {:>10} = Engram {} {}, staging {}, runtime {}, token history {}, prompt cache {}; "
                     "has {}  {}\n",
                     "host", gib_cell(h.need()), engram_placement_name(in.engram), gib_cell(h.engram),
                     gib_cell(h.staging), gib_cell(h.runtime), gib_cell(h.history), gib_cell(h.prompt_cache),
                     p.host_known() ? gib_cell(in.host_memory) : "?",
                     !p.host_known() ? "unknown" : p.host_fits() ? "fits" : "SHORT");
  if (h.engram_page_cache > 0)
    out += fmt::format("{:<8} the page cache would like {} GiB more for the mapped Engram tables (not required)\n", "",
                       gib_cell(h.engram_page_cache));
  for (const std::string& n : p.notes) out += "note: " + n + "\n";
  const char* v = !p.device_known() || !p.host_known() ? "unknown (GPU or host memory not given)"
                  : p.fits()                           ? "fits"
                                                       : "does not fit";
  out += fmt::format("verdict: {}\n", v);
  return out;
}

}  // namespace dsv4::engine
