// Output-column cuts of EXL3 linears for a tensor-parallel rank's weights (rank_weights.h).
//
// EXL3 stores W as [in, out] (y = x·W; formats.md §1.2), so the release's row cut of wq_b (the rank's heads),
// wo_a (its output groups) and the head (its vocabulary rows) is a cut of EXL3's out dimension: whole 16x16
// tiles (the trellis along its second axis), svh and bias along out, suh whole. A cut must fall on the
// output Hadamard's 128-column blocks (formats.md §1.3: H_N mixes the 128 columns of a block), else the
// rank's columns would not be the whole linear's columns. The cut part remembers the whole part's padded out
// width (family::Exl3Part::k_split_out), from which a device chooses its K split, so the rank's columns are
// summed in the whole linear's order, bit for bit.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "family/deepseek_v41/weights.h"
#include "core/status.h"
#include "formats/exl3/linear.h"

namespace dsv4::fabric {

// The stored tensors of output columns [b, e) of `L`: trellis i16 [in/16, (e-b)/16, 16·bits], svh and bias
// [b, e), suh whole. b and e must be multiples of 128 with 0 <= b < e <= out_features (invalid_argument
// naming the layer otherwise).
StatusOr<exl3::Linear> exl3_columns(const exl3::Linear& L, int64_t b, int64_t e);

// Whether outputs [b, e) of `w` can be cut (ok) or why not (invalid_argument naming `name`): inside
// [0, w.out), non-empty; a part partly inside is the only part (a block-diagonal linear's cut falls between
// parts, which keeps each part's inputs whole), and the cut's ends inside it fall on 128-column blocks (or
// at its last logical output, its padding going with the last slice).
Status exl3_check_cut(const family::Exl3Linear& w, int64_t b, int64_t e, std::string_view name);

// Outputs [b, e) of `w` (the logical outputs of its parts side by side), checked as above: the parts that
// end up wholly outside are dropped with their inputs (a block-diagonal linear keeps the inputs of the parts
// it holds: a rank's wo_a reads only its heads), whole parts are kept as they are, and the one part cut
// inside keeps its inputs and its columns: the stored tensors (exl3_columns),
// k_split_out set to the whole part's padded out width.
StatusOr<family::Exl3Ref> exl3_outputs(const family::Exl3Linear& w, int64_t b, int64_t e, std::string_view name);

}  // namespace dsv4::fabric
