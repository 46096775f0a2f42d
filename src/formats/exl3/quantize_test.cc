// The synthetic-pack encoder: its tiles read back through the reader, and its layers decode near the
// weights they were made from, with exact zeros for padding.
#include "formats/exl3/quantize.h"

#include <gtest/gtest.h>

#include <cmath>

#include "formats/exl3/trellis.h"

namespace dsv4::exl3 {
namespace {

TEST(Exl3Quantize, PackedCodesReadBackAsShiftRegisterStates) {
  // Expected states from the shift-register definition of formats.md §1.6 step 4, computed here from
  // the codes directly (state_p = (state_{p-1} << K | c_p) & 0xFFFF, wrapping around the tile).
  for (int bits = 1; bits <= 8; ++bits) {
    uint16_t codes[256];
    uint32_t z = 12345u + bits;
    for (int p = 0; p < 256; ++p) {
      z = z * 1664525u + 1013904223u;
      codes[p] = static_cast<uint16_t>((z >> 16) & ((1u << bits) - 1));
    }
    std::vector<uint16_t> words(16 * bits);
    pack_tile_codes(codes, bits, words.data());
    uint16_t states[256];
    decode_tile_states(words.data(), bits, states);
    for (int p = 0; p < 256; ++p) {
      uint32_t s = 0;
      for (int back = (16 + bits - 1) / bits; back >= 0; --back) s = (s << bits) | codes[(p - back + 256) % 256];
      ASSERT_EQ(states[p], s & 0xFFFF) << "bits " << bits << " p " << p;
    }
  }
}

TEST(Exl3Quantize, LayerDecodesNearItsSourceWithExactZeroPadding) {
  const int64_t in = 256, out = 128;
  std::vector<float> w(in * out, 0.0f);
  uint32_t z = 7;
  for (int64_t k = 0; k < 200; ++k)  // rows 200.. and columns 100.. stay zero, as padding does
    for (int64_t n = 0; n < 100; ++n) {
      double g = 0;
      for (int i = 0; i < 4; ++i) z = z * 1664525u + 1013904223u, g += (z >> 8) / 16777216.0;
      w[k * out + n] = static_cast<float>((g - 2.0) * 0.05);
    }
  for (Codebook cb : {Codebook::mul1, Codebook::mcg, Codebook::inst3}) {
    for (int bits : {2, 4, 6}) {
      const Linear L = quantize_linear("t", w, in, out, bits, cb, 1);
      ASSERT_TRUE(validate(L).ok());
      const std::vector<float> d = dense_weight(L);
      double err = 0, ref = 0;
      for (int64_t k = 0; k < in; ++k)
        for (int64_t n = 0; n < out; ++n) {
          const double e = d[k * out + n] - w[k * out + n];
          err += e * e, ref += double(w[k * out + n]) * w[k * out + n];
          if (k >= 200 || n >= 100) ASSERT_EQ(d[k * out + n], 0.0f) << k << "," << n;
        }
      // Loose bounds: a useless encoder (e.g. all-zero codes) has relative error ~1; a greedy trellis
      // fit improves with every bit. The decode itself is exact (fixture_test); this checks the fit.
      const double rel = std::sqrt(err / ref);
      EXPECT_LT(rel, bits == 2 ? 0.75 : bits == 4 ? 0.4 : 0.2) << codebook_name(cb) << " K=" << bits;
    }
  }
}

}  // namespace
}  // namespace dsv4::exl3
