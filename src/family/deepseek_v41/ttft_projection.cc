// Time to first token from per-role prefill times (see ttft_projection.h).
#include "family/deepseek_v41/ttft_projection.h"

#include <algorithm>
#include <map>

#include "family/deepseek_v41/layer_roles.h"
#include "family/deepseek_v41/replay.h"

namespace dsv4::family {

std::vector<RoleStandIn> engram_stand_ins(const ModelPlan& plan) {
  static const std::string kFlag = "+engram";
  std::vector<RoleStandIn> out;
  for (const RoleLayer& r : plan_roles(plan)) {
    const size_t at = r.role.find(kFlag);
    if (at == std::string::npos) continue;
    std::string plain = r.role;
    plain.erase(at, kFlag.size());
    out.push_back({r.role, plain, "timed without its Engram, as " + plain});
  }
  return out;
}

std::optional<double> role_ms_at(const std::vector<RoleTime>& times, const std::string& role, int64_t chunk,
                                 int64_t context, bool* extrapolated) {
  // The measured contexts of this role and chunk, in order; repeated points (several layers of one role) averaged.
  std::map<int64_t, std::pair<double, int>> sum;
  for (const RoleTime& t : times)
    if (t.role == role && t.chunk == chunk) sum[t.context].first += t.ms, ++sum[t.context].second;
  if (sum.empty()) return std::nullopt;
  std::vector<std::pair<int64_t, double>> pts;
  for (const auto& [L, s] : sum) pts.emplace_back(L, s.first / s.second);
  const bool outside = context < pts.front().first || context > pts.back().first;
  if (extrapolated) *extrapolated = outside;
  if (pts.size() == 1) return pts.front().second;
  // The segment holding `context`, else the first or last one (extended beyond its ends).
  size_t i = 0;
  while (i + 2 < pts.size() && context > pts[i + 1].first) ++i;
  const auto [x0, y0] = pts[i];
  const auto [x1, y1] = pts[i + 1];
  const double y = y0 + (y1 - y0) * static_cast<double>(context - x0) / static_cast<double>(x1 - x0);
  return std::max(0.0, y);
}

TtftProjection project_ttft(const ModelPlan& plan, const std::vector<RoleTime>& times,
                            const std::vector<RoleStandIn>& stand_ins, const TtftQuery& q) {
  TtftProjection r;
  r.chunk = q.chunk;
  r.layers = plan.n_layers;
  // Each role once, with how it is timed: its own measurements at this chunk size, else its stand-in's, else
  // missing. Every backbone layer belongs to one of them; the drafter's stages are listed, not counted.
  std::map<std::string, size_t> slot;
  for (const RoleLayer& rl : plan_roles(plan)) {
    RoleContribution c;
    c.role = c.timed_as = rl.role;
    if (rl.layer >= plan.n_layers) {
      c.timing = RoleTiming::not_counted;
      c.layers = static_cast<int32_t>(plan.dspark.size());
      c.why = "drafter stages: not part of the backbone's prefill";
    } else if (!role_ms_at(times, rl.role, q.chunk, 0, nullptr)) {
      c.timing = RoleTiming::missing;
      for (const RoleStandIn& s : stand_ins)
        if (s.role == rl.role && role_ms_at(times, s.timed_as, q.chunk, 0, nullptr)) {
          c.timing = RoleTiming::stand_in;
          c.timed_as = s.timed_as;
          c.why = s.why;
        }
      if (c.timing == RoleTiming::missing) c.why = "not measured at this chunk size";
    }
    slot[rl.role] = r.roles.size();
    r.roles.push_back(std::move(c));
  }
  std::vector<size_t> role_of(plan.n_layers);
  for (int32_t l = 0; l < plan.n_layers; ++l) {
    role_of[l] = slot.at(layer_role(plan.layers[l]));
    RoleContribution& c = r.roles[role_of[l]];
    ++c.layers;
    if (c.timing == RoleTiming::missing) ++r.missing_layers;
  }
  if (q.prompt <= 0 || q.chunk <= 0) return r;

  ReplayShape shape;
  if (q.bounded_replay) shape = replay_shape(plan, q.ring_capacity, q.drafter);
  r.bounded_from = shape.bounded() ? shape.from : -1;
  r.chunks = (q.prompt + q.chunk - 1) / q.chunk;
  r.last_chunk_rows = q.prompt - (r.chunks - 1) * q.chunk;
  r.max_context = (r.chunks - 1) * q.chunk;
  for (int64_t k = 0; k < r.chunks; ++k) {
    const int64_t context = k * q.chunk;
    const int64_t rows = std::min(q.chunk, q.prompt - context);
    // The prompt's pieces ask for no logits except the last, which asks for its last row's.
    const bool last = k + 1 == r.chunks;
    const std::vector<int64_t> first = cone_first_rows(shape, rows, last ? rows - 1 : rows);
    // This chunk's time of each counted role (every layer of a role at one context takes the same).
    std::vector<double> ms(r.roles.size(), 0.0);
    for (size_t i = 0; i < r.roles.size(); ++i) {
      RoleContribution& c = r.roles[i];
      if (c.timing == RoleTiming::missing || c.timing == RoleTiming::not_counted) continue;
      bool outside = false;
      ms[i] = *role_ms_at(times, c.timed_as, q.chunk, context, &outside);
      c.extrapolated |= outside;
      r.extrapolated |= outside;
    }
    for (int32_t l = 0; l < plan.n_layers; ++l) {
      RoleContribution& c = r.roles[role_of[l]];
      if (c.timing == RoleTiming::missing) continue;
      const int64_t computed = shape.bounded() && l >= shape.from ? rows - first[l - shape.from] : rows;
      c.ms += ms[role_of[l]] * static_cast<double>(computed) / static_cast<double>(q.chunk);
      c.row_layers += computed;
      r.row_layers += computed;
      r.full_row_layers += rows;
    }
  }
  for (const RoleContribution& c : r.roles) r.ms += c.ms;
  return r;
}

}  // namespace dsv4::family
