// A small EXL3 encoder for synthetic packs: scales, Hadamard rotations and greedy trellis codes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/exl3/linear.h"

namespace dsv4::exl3 {

// Encodes the 256 stream-order target values of one tile into its 16·bits stored int16 words, picking
// each K-bit code greedily (the codebook value of the resulting 16-bit state nearest the target).
// Tail-biting: a second pass starts from the first pass's final state, so the wrapped state of p = 0
// is usually consistent. Any code sequence is a valid tile; only the fit depends on the choice.
void encode_tile(const float target[256], int bits, Codebook cb, uint16_t* words);

// Packs 256 K-bit codes (stream order) into a tile's int16 words (formats.md §1.6: code p at stream
// bits [pK, (p+1)K), MSB-first inside little-endian uint32 words) -- the inverse of the reader.
void pack_tile_codes(const uint16_t codes[256], int bits, uint16_t* words);

// Quantizes W [in, out] (y = x·W; row-major, in and out multiples of 128) into an EXL3 linear:
// svh = sign · column RMS, suh = sign · row RMS of the column-rotated matrix / codebook RMS (both
// rounded to fp16 first and then used exactly), Wq target = H_K·diag(1/suh)·W·diag(1/svh)·H_N, tiles
// encoded by encode_tile. All-zero rows/columns (padding) get a zero scale, so they decode to exact
// zeros. Signs are a function of (seed, name). The fit is rough (greedy, no Hessian): this is for
// synthetic packs, whose decode -- not their accuracy -- is what the engine must get exactly right.
Linear quantize_linear(const std::string& name, const std::vector<float>& w, int64_t in, int64_t out,
                       int bits, Codebook cb, uint64_t seed);

}  // namespace dsv4::exl3
