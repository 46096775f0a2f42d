// Time to first token projected from per-role prefill times (docs/bench.md, "Projected time to first token").
//
// A prompt of P tokens is fed as ceil(P / C) chunks of C rows; chunk k starts after k*C cached rows. Every
// backbone layer of the plan takes, for each chunk, the measured time of its role at that chunk size,
// interpolated linearly in the cached rows between the measured contexts (extrapolated linearly outside them,
// and flagged), scaled by the rows the layer computes over C: the chunk's rows, or with bounded replay the rows
// of the layer's cone for that piece (family::cone_first_rows; docs/replay.md). The sum is the layers' time
// alone on one device: no embedding, head, sampling, host work or transfers between devices.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "family/deepseek_v41/layer_plan.h"

namespace dsv4::family {

// One measurement: a layer of `role` took `ms` for a `chunk`-row call after `context` cached rows, every row
// computed.
struct RoleTime {
  std::string role;
  int64_t chunk = 0;
  int64_t context = 0;
  double ms = 0;
};

// A plan role timed by another role's measurements, and why (e.g. an Engram layer built without its Engram).
struct RoleStandIn {
  std::string role;
  std::string timed_as;
  std::string why;
};

// Each Engram role of `plan` timed as its plain twin ("window+engram" as "window"): for measurements of layers
// built without Engram.
std::vector<RoleStandIn> engram_stand_ins(const ModelPlan& plan);

struct TtftQuery {
  int64_t prompt = 0;         // P: tokens of the prompt
  int64_t chunk = 0;          // C: rows of each prefill call (the last may be shorter)
  bool bounded_replay = false;
  int64_t ring_capacity = 0;  // rows each window ring keeps (window + max_rollback): the cones' state rows
  bool drafter = true;        // the drafter runs (its tap rows join the cones)
};

// How a role's layers were timed.
enum class RoleTiming {
  measured,     // its own measurements
  stand_in,     // another role's (RoleStandIn)
  missing,      // no measurement at the chunk size: its layers are not in the total
  not_counted,  // DSpark stages: the drafter, not part of the backbone's prefill
};

struct RoleContribution {
  std::string role;
  std::string timed_as;   // the role whose measurements were used (== role when measured)
  RoleTiming timing = RoleTiming::measured;
  std::string why;        // the stand-in's reason, or why not counted
  int32_t layers = 0;     // layers of the plan with this role (stages for "dspark")
  double ms = 0;          // their time summed over the prompt's chunks
  int64_t row_layers = 0; // rows computed summed over the layers and chunks
  bool extrapolated = false;  // some chunk's context lay outside the measured contexts
};

struct TtftProjection {
  double ms = 0;                 // the counted layers over every chunk
  int64_t chunk = 0;             // C
  int64_t chunks = 0;
  int64_t last_chunk_rows = 0;   // < chunk: the last chunk's times scaled by its rows
  int32_t layers = 0;            // backbone layers of the plan
  int32_t missing_layers = 0;    // of those, layers whose role has no measurement (not in ms)
  int32_t bounded_from = -1;     // with replay on: the first bounded layer; -1 none (no decoder, or replay off)
  int64_t row_layers = 0;        // rows computed over every counted layer and chunk
  int64_t full_row_layers = 0;   // the same with every layer on every row
  bool extrapolated = false;     // some chunk's context lay outside a role's measured contexts
  int64_t max_context = 0;       // the last chunk's cached rows
  std::vector<RoleContribution> roles;  // in the order of plan_roles (dspark last)
  bool complete() const { return missing_layers == 0; }
  bool short_last_chunk() const { return last_chunk_rows > 0 && last_chunk_rows < chunk; }
};

// The measured time of `role` for a `chunk`-row call at `context` cached rows: linear between the two measured
// contexts around it, the line through the nearest two outside them (a lone context: its time), never below 0.
// nullopt when `role` has no measurement at `chunk`. *extrapolated: context outside the measured ones.
std::optional<double> role_ms_at(const std::vector<RoleTime>& times, const std::string& role, int64_t chunk,
                                 int64_t context, bool* extrapolated);

// The projection for one prompt, chunk size and replay setting over every backbone layer of `plan` (the full
// plan of the variant: it supplies the layer counts and the cones).
TtftProjection project_ttft(const ModelPlan& plan, const std::vector<RoleTime>& times,
                            const std::vector<RoleStandIn>& stand_ins, const TtftQuery& q);

}  // namespace dsv4::family
