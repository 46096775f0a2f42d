// EXL3 trellis bitstream decode (tail-biting 16-bit shift register over a circular tile stream).
#include "formats/exl3/trellis.h"

namespace dsv4::exl3 {

TilePos tile_position(int p) {
  const int lane = p / 8;
  const int j = p % 8;
  return {2 * (lane % 4) + (j & 1) + 8 * ((j >> 1) & 1), lane / 4 + 8 * (j >> 2)};
}

void decode_tile_states(const uint16_t* words, int bits, uint16_t states[256]) {
  // The tile is a circular stream of R = 256·bits bits held in 8·bits uint32 words
  // (w32[i] = u16[2i] | u16[2i+1] << 16), MSB-first inside each word.
  const int n32 = 8 * bits;
  const int64_t total_bits = 256LL * bits;
  uint32_t w32[64];
  for (int i = 0; i < n32; ++i) w32[i] = uint32_t(words[2 * i]) | (uint32_t(words[2 * i + 1]) << 16);
  // state_p = the 16 stream bits ending (exclusive) at (p+1)·bits, modulo R, first bit most
  // significant; 16 bits starting at bit offset o < 32 of word i always lie in words i and i+1.
  for (int p = 0; p < 256; ++p) {
    const int64_t start = (int64_t(p + 1) * bits - 16 + total_bits) % total_bits;
    const int i = static_cast<int>(start / 32);
    const int o = static_cast<int>(start % 32);
    const uint64_t window = (uint64_t(w32[i]) << 32) | w32[(i + 1) % n32];
    states[p] = static_cast<uint16_t>(window >> (48 - o));
  }
}

void decode_tile(const Words& trellis, int64_t kt, int64_t nt, int64_t tiles_n, int bits, Codebook cb,
                 uint16_t wq_tile[16][16]) {
  const int64_t words_per_tile = int64_t(kTile) * bits;
  uint16_t words[16 * 8];
  trellis.copy((kt * tiles_n + nt) * words_per_tile, words_per_tile, words);
  uint16_t states[256];
  decode_tile_states(words, bits, states);
  const uint16_t* table = codebook_table(cb);
  for (int p = 0; p < 256; ++p) {
    const TilePos pos = tile_position(p);
    wq_tile[pos.row][pos.col] = table[states[p]];
  }
}

std::vector<uint16_t> decode_trellis(const Words& trellis, int64_t in_features, int64_t out_features, int bits,
                                     Codebook cb) {
  const int64_t tiles_k = in_features / kTile;
  const int64_t tiles_n = out_features / kTile;
  std::vector<uint16_t> wq(static_cast<size_t>(in_features * out_features));
  uint16_t tile[16][16];
  for (int64_t kt = 0; kt < tiles_k; ++kt)
    for (int64_t nt = 0; nt < tiles_n; ++nt) {
      decode_tile(trellis, kt, nt, tiles_n, bits, cb, tile);
      for (int r = 0; r < kTile; ++r)
        for (int c = 0; c < kTile; ++c) wq[(kt * kTile + r) * out_features + nt * kTile + c] = tile[r][c];
    }
  return wq;
}

}  // namespace dsv4::exl3
