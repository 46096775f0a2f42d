// Greedy EXL3 encoder (see quantize.h): the decode formula of formats.md §1.3 inverted.
#include "formats/exl3/quantize.h"

#include <cmath>
#include <limits>

#include "formats/exl3/hadamard.h"
#include "formats/exl3/half.h"
#include "formats/exl3/trellis.h"

namespace dsv4::exl3 {
namespace {

uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t name_key(uint64_t seed, const std::string& name, uint64_t side) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001b3ULL;
  return mix(h ^ mix(seed ^ side));
}

// One greedy pass from `state` (the state before p = 0); returns the final state.
uint16_t greedy_pass(const float target[256], int bits, const float* values, uint16_t state, uint16_t codes[256]) {
  const uint32_t n_codes = 1u << bits;
  for (int p = 0; p < 256; ++p) {
    const uint32_t base = (uint32_t(state) << bits) & 0xFFFFu;
    uint32_t best = 0;
    float best_err = std::numeric_limits<float>::infinity();
    for (uint32_t c = 0; c < n_codes; ++c) {
      const float err = std::fabs(values[base | c] - target[p]);
      if (err < best_err) best_err = err, best = c;
    }
    codes[p] = static_cast<uint16_t>(best);
    state = static_cast<uint16_t>(base | best);
  }
  return state;
}

const float* codebook_floats(Codebook cb) {
  static const auto make = [](Codebook c) {
    auto* v = new float[65536];
    const uint16_t* t = codebook_table(c);
    for (int s = 0; s < 65536; ++s) v[s] = static_cast<float>(half_bits_to_double(t[s]));
    return v;
  };
  static const float* tables[3] = {make(Codebook::inst3), make(Codebook::mcg), make(Codebook::mul1)};
  return tables[static_cast<int>(cb)];
}

double codebook_rms(Codebook cb) {
  const float* v = codebook_floats(cb);
  double s = 0;
  for (int i = 0; i < 65536; ++i) s += double(v[i]) * v[i];
  return std::sqrt(s / 65536);
}

}  // namespace

void pack_tile_codes(const uint16_t codes[256], int bits, uint16_t* words) {
  uint32_t w32[64] = {};
  for (int p = 0; p < 256; ++p)
    for (int i = 0; i < bits; ++i) {
      if (!((codes[p] >> (bits - 1 - i)) & 1)) continue;  // MSB of the code first
      const int b = p * bits + i;
      w32[b / 32] |= 1u << (31 - b % 32);
    }
  for (int i = 0; i < 8 * bits; ++i) {
    words[2 * i] = static_cast<uint16_t>(w32[i] & 0xFFFFu);
    words[2 * i + 1] = static_cast<uint16_t>(w32[i] >> 16);
  }
}

void encode_tile(const float target[256], int bits, Codebook cb, uint16_t* words) {
  const float* values = codebook_floats(cb);
  uint16_t codes[256];
  const uint16_t last = greedy_pass(target, bits, values, 0, codes);
  greedy_pass(target, bits, values, last, codes);
  pack_tile_codes(codes, bits, words);
}

Linear quantize_linear(const std::string& name, const std::vector<float>& w, int64_t in, int64_t out, int bits,
                       Codebook cb, uint64_t seed) {
  Linear L;
  L.name = name;
  L.in_features = in;
  L.out_features = out;
  L.bits = bits;
  L.codebook = cb;
  const uint64_t ku = name_key(seed, name, 1), kv = name_key(seed, name, 2);
  const auto sign = [](uint64_t key, int64_t i) { return (mix(key ^ mix(static_cast<uint64_t>(i))) & 1) ? -1.0 : 1.0; };
  // svh: sign times column RMS (fp16), a zero column gets 0.
  std::vector<double> col(out, 0.0);
  for (int64_t k = 0; k < in; ++k)
    for (int64_t n = 0; n < out; ++n) col[n] += double(w[k * out + n]) * w[k * out + n];
  L.svh.resize(out);
  std::vector<double> inv_sv(out);
  for (int64_t n = 0; n < out; ++n) {
    const double rms = std::sqrt(col[n] / in);
    L.svh[n] = double_to_half_bits(rms > 0 ? sign(kv, n) * rms : 0.0);
    const double s = half_bits_to_double(L.svh[n]);
    inv_sv[n] = s != 0 ? 1.0 / s : 0.0;
  }
  // A = W·diag(1/svh)·H_N (orthonormal H), row by row.
  std::vector<double> a(static_cast<size_t>(in * out));
  for (int64_t k = 0; k < in; ++k) {
    double* row = &a[k * out];
    for (int64_t n = 0; n < out; ++n) row[n] = w[k * out + n] * inv_sv[n];
    for (int64_t n0 = 0; n0 < out; n0 += kHadamardSize) hadamard128_unnormalized(row + n0);
    for (int64_t n = 0; n < out; ++n) row[n] /= std::sqrt(double(kHadamardSize));
  }
  // suh: sign times row RMS of A over the codebook's RMS, so H_K·diag(1/suh)·A has unit codebook scale.
  const double cb_rms = codebook_rms(cb);
  L.suh.resize(in);
  for (int64_t k = 0; k < in; ++k) {
    double s = 0;
    for (int64_t n = 0; n < out; ++n) s += a[k * out + n] * a[k * out + n];
    const double rms = std::sqrt(s / out);
    L.suh[k] = double_to_half_bits(rms > 0 ? sign(ku, k) * rms / cb_rms : 0.0);
    const double su = half_bits_to_double(L.suh[k]);
    const double inv = su != 0 ? 1.0 / su : 0.0;
    for (int64_t n = 0; n < out; ++n) a[k * out + n] *= inv;
  }
  for (int64_t n = 0; n < out; ++n)
    for (int64_t k0 = 0; k0 < in; k0 += kHadamardSize) hadamard128_unnormalized(&a[k0 * out + n], out);
  const double inv_sqrt = 1.0 / std::sqrt(double(kHadamardSize));
  // Encode every tile from its target values in stream order.
  const int64_t tiles_n = out / kTile, words_per_tile = int64_t(kTile) * bits;
  std::vector<uint16_t> trellis(static_cast<size_t>(in / kTile * tiles_n * words_per_tile), 0);
  float target[256];
  for (int64_t kt = 0; kt < in / kTile; ++kt)
    for (int64_t nt = 0; nt < tiles_n; ++nt) {
      for (int p = 0; p < 256; ++p) {
        const TilePos pos = tile_position(p);
        target[p] = static_cast<float>(a[(kt * kTile + pos.row) * out + nt * kTile + pos.col] * inv_sqrt);
      }
      encode_tile(target, bits, cb, &trellis[(kt * tiles_n + nt) * words_per_tile]);
    }
  L.trellis = std::move(trellis);
  return L;
}

}  // namespace dsv4::exl3
