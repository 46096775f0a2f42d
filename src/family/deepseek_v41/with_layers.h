// with_layers: a config cut to a set of its backbone layers, renumbered in order (full width, head, final norm,
// DSpark stages): any set that keeps the layers its layers read from, its first N, or its first N and M layers of
// its decoder.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "family/deepseek_v41/config.h"

namespace dsv4::family {

// The config of `c` with only backbone layers 0..n-1; every width, the head, the final norm, the
// vision tower and every DSpark stage stay. Rules (deterministic, all from `c`):
//   - compress_ratios: the first n entries, then the DSpark stages' entries unchanged;
//   - kv_source_layer_ids, index_source_layer_ids, engram_layer_ids (with their
//     engram_num_embeddings): the entries below n;
//   - candidate_source_layer_id: kept when below n, else -1 (no candidates). Every re-indexing layer
//     comes after the candidate source (validate_config), so none remains without it;
//   - num_hash_layers (V4-0731): min(num_hash_layers, n);
//   - dspark_target_layer_ids: kept when all lie below n, else the last min(k, n) kept layers
//     (k = how many there were): the stages tap the top of the cut backbone, as the presets'
//     stages tap their last three layers; main_proj narrows only when n < k.
// Every check of validate_config looks at a layer and the layers before it, so a prefix of a valid
// config stays valid; the result is validated anyway. n >= num_hidden_layers returns `c` unchanged;
// the minimum is 1 (layer 0) for every preset and variant; n < 1 is refused (invalid_argument).
StatusOr<Config> with_layers(const Config& c, int32_t n);

// The config of `c` with only the backbone layers `ids` (strictly ascending plan ids), renumbered 0..k-1 in
// order; every width, the head, the final norm, the vision tower and every DSpark stage stay. A kept layer's
// tensors are the uncut layer's under its new number. Rules (deterministic, all from `c`):
//   - compress_ratios: the kept layers' entries, then the DSpark stages' entries unchanged;
//   - kv_source_layer_ids, index_source_layer_ids, engram_layer_ids (with their engram_num_embeddings):
//     the kept entries, renumbered; candidate_source_layer_id renumbered when kept, else -1;
//   - num_hash_layers (V4-0731): how many kept layers lie below it (hash routing stays a prefix);
//   - dspark_target_layer_ids: renumbered when all are kept, else the last min(k, kept) kept layers (as
//     with_layers).
// Refused (invalid_argument): an empty, unordered or out-of-range list, and a list where a kept layer reads
// state from a dropped one (layer_sources.h: compressed KV rows, top-k, index keys, candidate blocks, an
// earlier Engram layer's primes); the message names the layer, what it reads and the layer to add
// (close_layer_ids adds them all). A renumbered Engram layer hashes with its new id's multipliers: the shapes
// stay, the values are the cut's own. The result is validated.
StatusOr<Config> with_layer_ids(const Config& c, const std::vector<int32_t>& ids);

// The config of `c` with backbone layers 0..n-1 followed by m layers of its decoder — the first layer bounded
// replay bounds (the last owner of compressed rows or index keys, family/deepseek_v41/replay.h: V4.1's layer
// 20) and the m - 1 after it — renumbered n..n+m-1 with their roles (`dsv4 bench` measures bounded replay on a
// model that fits one GPU). Role lists (KV, index, candidate source, Engram) keep the entries of kept layers,
// renumbered; num_hash_layers min(num_hash_layers, n); DSpark targets as with_layers. Refused
// (invalid_argument): a model without a decoder, n < 1, m < 1, n past the decoder's first layer or m past its
// last. The result is validated. The same cut as with_layer_ids(c, {0..n-1, b..b+m-1}).
StatusOr<Config> with_decoder_layers(const Config& c, int32_t n, int32_t m);

}  // namespace dsv4::family
