// Engram hash rows (model-spec.md §3.4 d): the table rows one position reads, from the compressed-id history.
#pragma once

#include <cstdint>

#include "family/deepseek_v41/engram_layout.h"

namespace dsv4::family {

// The `cols` = (max_ngram - 1) * n_heads table rows of position p of history c (compressed ids, -1 = DEAD),
// in (order, head) column order, for Engram layer `layer` of `lay`; pad is the compressed id of the pad token
// (what a blocked lookback reads).
void engram_hash_rows(const EngramLayout& lay, const EngramLayerLayout& layer, const int64_t* c, int64_t p,
                      int64_t pad, int64_t* rows);

}  // namespace dsv4::family
