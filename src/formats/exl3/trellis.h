// EXL3 trellis decode: packed 16x16 tiles of K-bit codes -> the fp16 weight matrix Wq (formats.md §1.6-1.7).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "formats/exl3/codebook.h"
#include "formats/exl3/words.h"

namespace dsv4::exl3 {

inline constexpr int kTile = 16;  // tiles are 16x16 weights

// Position of stream value p (0..255) inside its tile: the mma.m16n8k16 B-fragment order.
struct TilePos {
  int row;  // along K (input features)
  int col;  // along N (output features)
};
TilePos tile_position(int p);

// The 256 trellis states of one tile, in stream order. `words` are the tile's 16·bits int16
// elements as stored (little-endian, possibly unaligned in the file; pass a copy or an aligned
// view). bits = 1..8.
void decode_tile_states(const uint16_t* words, int bits, uint16_t states[256]);

// Decodes a whole trellis `int16 [in/16, out/16, 16·bits]` into Wq, fp16 bits, row-major
// [in, out] (EXL3's input-major orientation). `trellis` holds in/16·out/16·16·bits words.
std::vector<uint16_t> decode_trellis(const Words& trellis, int64_t in_features, int64_t out_features, int bits,
                                     Codebook cb);

// Tile (kt, nt) of a trellis of `tiles_n` tile columns: its 256 fp16 weights as `wq_tile[row][col]`.
void decode_tile(const Words& trellis, int64_t kt, int64_t nt, int64_t tiles_n, int bits, Codebook cb,
                 uint16_t wq_tile[16][16]);

}  // namespace dsv4::exl3
