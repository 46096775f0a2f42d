// Bounded decoder replay (docs/replay.md): which rows of a prompt piece each layer must compute so that the
// logits asked for and every cache a stream keeps equal a full prefill's, derived from the layer plan.
//
// Above the last layer that writes rows every later position reads (compressed KV, index keys; V4.1 layer
// 20, the candidate source), a layer's only cross-row state is its window ring: row t of layer l reads the
// window keys of rows t-W+1 .. t of layer l, i.e. layer l's inputs there. So a piece computes, layer by layer
// from the top, only the cone of the rows whose outputs matter: the logit rows at the last layer, and at
// every layer the rows whose window keys the ring keeps (the last ring_capacity rows: state for later
// steps and rollback) and the rows the drafter taps. Rows before the piece come from the stream's rings.
#pragma once

#include <cstdint>
#include <vector>

#include "family/deepseek_v41/layer_plan.h"

namespace dsv4::family {

// What the cones of a model depend on.
struct ReplayShape {
  // The first bounded layer: the last layer that every row must reach (it owns compressed rows or index keys;
  // or it applies Engram or hash routing, whose per-row inputs are staged for the whole call). Its attention
  // input — hence its window keys and compressor — covers every row; its query side and everything above run
  // on cones. -1: no layer is bounded (such a layer is the model's last: V4-Flash-0731's layer 42).
  int32_t from = -1;
  int32_t n_layers = 0;
  int64_t window = 0;      // W: row t's attention reads the window keys of rows t-W+1 .. t
  int64_t state_rows = 0;  // the last rows of a piece whose window keys the rings keep (their capacity)
  std::vector<uint8_t> tap;  // [n_layers] the drafter reads this layer's input of the last state_rows rows
  bool bounded() const { return from >= 0; }
};

// The shape of `plan` for streams whose rings hold `ring_capacity` rows (StateGeometry::ring_capacity), with
// or without the drafter running.
ReplayShape replay_shape(const ModelPlan& plan, int64_t ring_capacity, bool drafter);

// A piece of T rows whose first logit row is first_logit (T: none): for each layer l in [from, n_layers), at
// [l - from], the first piece row whose output of layer l is computed (rows [first, T); T: none). The rows
// whose input of layer l is read are those of layer l - 1's output (every row for l = from). Nondecreasing in
// l; every first row of layer l's input is at most max(0, T - state_rows) and at most first(l) - (W - 1).
std::vector<int64_t> cone_first_rows(const ReplayShape& s, int64_t T, int64_t first_logit);

// The first row of a T-row piece whose DSpark ring key the call writes: max(0, T - state_rows).
int64_t tap_first_row(const ReplayShape& s, int64_t T);

}  // namespace dsv4::family
