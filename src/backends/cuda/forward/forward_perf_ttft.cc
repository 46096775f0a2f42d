// The projected time to first token of `dsv4 bench --roles` (see forward_perf_layers.h, docs/bench.md): the
// per-role times of the per-layer prefill table summed over the full plan by family::project_ttft.
#include <fmt/format.h>

#include <iterator>
#include <set>
#include <string>

#include "backends/cuda/forward/forward.h"
#include "backends/cuda/forward/forward_perf_layers.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/replay.h"

namespace dsv4::cuda {
namespace {

// The prompts every --roles run projects: 8K, 32K and 128K tokens.
constexpr int64_t kPrompts[] = {8192, 32768, 131072};

// The flags of one projection: contexts beyond the measured ones, a short last chunk, roles without a time.
std::string flags(const family::TtftProjection& r) {
  std::string s;
  auto add = [&](const std::string& x) { s += (s.empty() ? "" : "; ") + x; };
  if (r.extrapolated) add(fmt::format("extrapolated (chunks up to {} cached rows)", r.max_context));
  if (r.short_last_chunk()) add(fmt::format("last chunk {} rows, scaled", r.last_chunk_rows));
  for (const family::RoleContribution& c : r.roles)
    if (c.timing == family::RoleTiming::missing) add(fmt::format("missing {} ({} layer{})", c.role, c.layers, c.layers == 1 ? "" : "s"));
  if (!r.complete()) add(fmt::format("{} of {} layers not in the sum", r.missing_layers, r.layers));
  return s;
}

}  // namespace

void print_ttft_projection(const std::vector<family::RoleTime>& times, const ForwardBenchOptions& f, std::FILE* out) {
  const family::ModelPlan whole = family::build_plan(family::preset_config(family::Preset::full, f.variant));
  const char* name = f.variant == family::Variant::v4 ? "V4-Flash-0731" : "V4.1-Flash";
  // The cones of the forward's streams: rings of window + max_rollback rows, the drafter running when the plan
  // has one (as the chunk projection of the prefix cut).
  const int64_t ring = whole.window + ForwardOptions{}.max_rollback;
  const bool drafter = whole.dspark_stages > 0;
  const family::ReplayShape shape = family::replay_shape(whole, ring, drafter);
  const std::vector<family::RoleStandIn> stand_ins = family::engram_stand_ins(whole);
  std::set<int64_t> prompts(std::begin(kPrompts), std::end(kPrompts));
  prompts.insert(f.ttft_prompts.begin(), f.ttft_prompts.end());

  std::fprintf(out, "\nprojected time to first token (per GPU, summed over the %d-layer plan of %s): the prompt as "
                    "ceil(P / C) chunks, chunk k after k*C cached rows; each plan layer takes its role's ms per chunk "
                    "from the table above, linear in the cached rows between the measured contexts (outside them the "
                    "nearest segment's line, flagged); a short last chunk scaled by its rows. The layers' device time "
                    "only: no embedding, head, sampling, host work or transfers between GPUs (docs/bench.md: what "
                    "bounds it)\n", whole.n_layers, name);
  if (shape.bounded())
    std::fprintf(out, "  bounded replay: layers %d..%d scaled by the rows of their cones per chunk (rings of %lld rows, "
                      "the last chunk's last row's logits; family::cone_first_rows)\n",
                 shape.from, whole.n_layers - 1, static_cast<long long>(ring));
  else
    std::fprintf(out, "  %s has no bounded layer (its last layer owns a compressor; docs/replay.md): bounded replay "
                      "computes every row, so only \"off\" is projected\n", name);
  // How each role is timed does not depend on the prompt: the first chunk size's projection lists them.
  const family::TtftProjection first =
      family::project_ttft(whole, times, stand_ins, {.prompt = 1, .chunk = f.prefill.empty() ? 0 : f.prefill[0]});
  std::string header = "| prompt | chunk | chunks | bounded replay | row-layers | ms | tokens/s |";
  std::string rule = "|---|---|---|---|---|---|---|";
  for (const family::RoleContribution& c : first.roles) {
    if (c.timing == family::RoleTiming::stand_in)
      std::fprintf(out, "  %s (%d layer%s): %s (the device synthesizer makes no Engram)\n", c.role.c_str(), c.layers,
                   c.layers == 1 ? "" : "s", c.why.c_str());
    if (c.timing == family::RoleTiming::not_counted) {
      std::fprintf(out, "  %s (%d stages): not counted, %s\n", c.role.c_str(), c.layers, c.why.c_str());
      continue;
    }
    header += fmt::format(" {} x{} ms |", c.role, c.layers);
    rule += "---|";
  }
  std::fprintf(out, "\n%s flags |\n%s---|\n", header.c_str(), rule.c_str());
  for (int64_t P : prompts)
    for (int64_t C : f.prefill)
      for (bool replay : {false, true}) {
        if (replay && !shape.bounded()) continue;
        const family::TtftProjection r = family::project_ttft(
            whole, times, stand_ins,
            {.prompt = P, .chunk = C, .bounded_replay = replay, .ring_capacity = ring, .drafter = drafter});
        std::string line = fmt::format("| {} | {} | {} | {} | {} | {:.1f} | {:.0f} |", P, C, r.chunks,
                                       replay ? "on" : "off", r.row_layers, r.ms, r.ms > 0 ? P * 1e3 / r.ms : 0.0);
        for (const family::RoleContribution& c : r.roles) {
          if (c.timing == family::RoleTiming::not_counted) continue;
          line += c.timing == family::RoleTiming::missing ? " - |" : fmt::format(" {:.1f} |", c.ms);
        }
        std::fprintf(out, "%s %s |\n", line.c_str(), flags(r).c_str());
      }
  std::fflush(out);
}

}  // namespace dsv4::cuda
