// Synthetic tensor values: counter-based noise per (seed, tensor, element), shaped per role and quantized.
#include "family/deepseek_v41/synth_values.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/bf16.h"
#include "core/quant.h"

namespace dsv4::family {
namespace {

uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t hash_at(uint64_t key, uint64_t i) { return splitmix64(key ^ splitmix64(i)); }

// The sum of the hash's four 16-bit fields, each + 0.5, / 65536, as U(0,1) draws: (sum + 2) / 65536 is
// exact in double (as is every partial sum), so the integer sum gives the bits of adding them one by one.
inline double noise_of(uint64_t h) {
  const uint64_t sum = (h & 0xFFFF) + ((h >> 16) & 0xFFFF) + ((h >> 32) & 0xFFFF) + (h >> 48);
  return ((static_cast<double>(sum) + 2.0) / 65536.0 - 2.0) * 1.7320508075688772;  // sum of 4 U(0,1): variance 1/3
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// "X.scale" -> "X.weight": scales are generated from their weight's values.
std::string weight_name_of(const std::string& scale_name) {
  return scale_name.substr(0, scale_name.size() - std::string_view(".scale").size()) + ".weight";
}

int64_t row_elems(const TensorSpec& t) {
  int64_t n = 1;
  for (size_t i = 1; i < t.shape.size(); ++i) n *= t.shape[i];
  return n;
}

double linear_gain(const std::string& n) {
  if (n == "head.weight") return 2.0;
  if (ends_with(n, "markov_head.head.weight") || ends_with(n, "markov_w2.weight")) return 0.5;
  if (ends_with(n, "attn.wo_b.weight") || ends_with(n, "engram.wkv.weight")) return 0.5;
  if (n.find("experts") != std::string::npos && ends_with(n, "w2.weight")) return 0.5;
  return 1.0;
}

// Per-element mean of an mHC base vector [(2+hc)*hc]: pre ~ sigmoid(-1.1) = 0.25, post = 2*sigmoid(-1.1)
// ~ 0.5, comb logits 3 on the diagonal (softmax ~0.87) and 0 elsewhere. hc_head_base [hc]: 0.
double hc_base_mean(const Config& c, const TensorSpec& t, int64_t i) {
  const int64_t hc = c.hc_mult;
  if (t.shape[0] == hc) return 0.0;
  if (i < 2 * hc) return -1.1;
  const int64_t k = i - 2 * hc;
  return k / hc == k % hc ? 3.0 : 0.0;
}

double element_value(const Config& c, const TensorSpec& t, const SynthDistribution& d, uint64_t key, int64_t i) {
  double mean = d.mean;
  if (t.role == TensorRole::hc_base) mean = hc_base_mean(c, t, i);
  return mean + d.std * synth_noise(key, static_cast<uint64_t>(i));
}

void fill_floats(const Config& c, const TensorSpec& t, const SynthDistribution& d, uint64_t key, int64_t first,
                 std::span<float> out) {
  if (t.role == TensorRole::hc_base) {
    for (size_t j = 0; j < out.size(); ++j)
      out[j] = static_cast<float>(element_value(c, t, d, key, first + static_cast<int64_t>(j)));
    return;
  }
  // element_value with the mean of every other role, a constant.
  const double mean = d.mean, std = d.std;
  for (size_t j = 0; j < out.size(); ++j)
    out[j] = static_cast<float>(mean + std * noise_of(hash_at(key, static_cast<uint64_t>(first) + j)));
}

// FP8 weight [out, in] with B x B tiles: codes and scales of tile row `tr`.
void fp8_tile_row(const Config& c, const TensorSpec& w, uint64_t seed, int64_t tr, std::vector<uint8_t>& codes,
                  std::vector<uint8_t>& scales) {
  const int64_t B = c.quant.weight_block_out, out = w.shape[0], in = w.shape[1];
  const int64_t r0 = tr * B, rows = std::min(B, out - r0);
  std::vector<float> vals(static_cast<size_t>(rows * in));
  fill_floats(c, w, synth_distribution(c, w), synth_stream_key(seed, w.name), r0 * in, vals);
  codes.resize(vals.size());
  scales.resize(static_cast<size_t>((in + B - 1) / B));
  quant_fp8_weight(vals, rows, in, static_cast<int>(B), codes, scales);
}

// A quantized weight's codes and scales, generated whole: its weight and scale tensors are asked for in
// chunks, one after the other, and each needs every value of the weight. Each thread keeps the last one.
struct Quantized {
  uint64_t key = 0;
  std::string name;
  std::vector<uint8_t> codes, scales;
};

constexpr int64_t kWholeTensorBytes = int64_t{256} << 20;  // larger weights are generated per row range

// `w`'s codes and scales (fp8 tiles, or the 32-element blocks of rows of fp4 weights and Engram tables)
// when its codes are at most kWholeTensorBytes; nullptr otherwise.
const Quantized* whole_quantized(const Config& c, const TensorSpec& w, uint64_t seed) {
  if (w.bytes() > kWholeTensorBytes) return nullptr;
  thread_local Quantized q;
  const uint64_t key = synth_stream_key(seed, w.name);
  if (!q.name.empty() && q.key == key && q.name == w.name) return &q;
  q.name.clear();
  q.key = key;
  q.codes.assign(static_cast<size_t>(w.bytes()), 0);
  if (w.role == TensorRole::fp8_weight) {
    const int64_t B = c.quant.weight_block_out, in = w.shape[1], tile_rows = (w.shape[0] + B - 1) / B;
    const int64_t per_tile_row = (in + B - 1) / B;
    q.scales.assign(static_cast<size_t>(tile_rows * per_tile_row), 0);
    std::vector<uint8_t> codes, scales;
    for (int64_t tr = 0; tr < tile_rows; ++tr) {
      fp8_tile_row(c, w, seed, tr, codes, scales);
      std::memcpy(q.codes.data() + tr * B * in, codes.data(), codes.size());
      std::memcpy(q.scales.data() + tr * per_tile_row, scales.data(), scales.size());
    }
  } else {
    const bool fp4 = w.role == TensorRole::fp4_weight;
    const int64_t in = fp4 ? w.shape[1] * 2 : w.shape[1], row_codes = fp4 ? in / 2 : in, row_scales = in / 32;
    q.scales.assign(static_cast<size_t>(w.shape[0] * row_scales), 0);
    const SynthDistribution d = synth_distribution(c, w);
    std::vector<float> vals(static_cast<size_t>(in));
    for (int64_t r = 0; r < w.shape[0]; ++r) {
      fill_floats(c, w, d, key, r * in, vals);
      std::span<uint8_t> codes(q.codes.data() + r * row_codes, static_cast<size_t>(row_codes));
      std::span<uint8_t> scales(q.scales.data() + r * row_scales, static_cast<size_t>(row_scales));
      if (fp4) quant_fp4_ue8m0(vals, 32, codes, scales);
      else quant_fp8_ue8m0(vals, 32, codes, scales);
    }
  }
  q.name = w.name;
  return &q;
}

}  // namespace

uint64_t synth_stream_key(uint64_t seed, std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001b3ULL;
  return splitmix64(h ^ splitmix64(seed));
}

double synth_noise(uint64_t key, uint64_t i) { return noise_of(hash_at(key, i)); }

SynthDistribution synth_distribution(const Config& c, const TensorSpec& t) {
  switch (t.role) {
    case TensorRole::fp8_weight:
    case TensorRole::linear:
      return {0.0, linear_gain(t.name) / std::sqrt(static_cast<double>(t.shape.back()))};
    case TensorRole::fp4_weight:
      return {0.0, linear_gain(t.name) / std::sqrt(static_cast<double>(2 * t.shape.back()))};
    case TensorRole::norm: return {1.0, 0.05};
    case TensorRole::embedding: return {0.0, 1.0};
    case TensorRole::engram_table: return {0.0, 1.0};
    case TensorRole::bias: return {0.0, 0.02};
    case TensorRole::attn_sink: return {0.0, 0.5};
    case TensorRole::hc_fn: return {0.0, 1.0 / std::sqrt(static_cast<double>(t.shape.back()))};
    case TensorRole::hc_base: return {0.0, 0.1};
    case TensorRole::hc_scale: return {0.1, 0.01};
    case TensorRole::ape: return {0.0, 0.1};
    case TensorRole::engram_gate: return {1.0, 0.05};
    case TensorRole::fp8_scale:
    case TensorRole::fp4_scale:
    case TensorRole::engram_scale:
    case TensorRole::tid2eid: return {0.0, 0.0};  // derived, not drawn
  }
  return {0.0, 0.0};
}

std::vector<uint8_t> synth_rows(const Config& c, const TensorTable& table, const TensorSpec& t, uint64_t seed,
                                int64_t r0, int64_t r1) {
  const int64_t per_row = row_elems(t), row_bytes = per_row * dtype_size(t.dtype);
  std::vector<uint8_t> out(static_cast<size_t>((r1 - r0) * row_bytes));
  if (r1 <= r0) return out;
  const uint64_t key = synth_stream_key(seed, t.name);
  switch (t.role) {
    case TensorRole::fp8_weight:
    case TensorRole::fp8_scale:
    case TensorRole::fp4_weight:
    case TensorRole::fp4_scale:
    case TensorRole::engram_table:
    case TensorRole::engram_scale: {
      const bool is_scale = t.role == TensorRole::fp8_scale || t.role == TensorRole::fp4_scale ||
                            t.role == TensorRole::engram_scale;
      const TensorSpec* w = is_scale ? table.find(weight_name_of(t.name)) : &t;
      DSV4_CHECK(w != nullptr);
      if (const Quantized* q = whole_quantized(c, *w, seed)) {
        const std::vector<uint8_t>& src = is_scale ? q->scales : q->codes;
        std::memcpy(out.data(), src.data() + r0 * row_bytes, out.size());
        return out;
      }
      break;
    }
    default: break;
  }
  switch (t.role) {
    case TensorRole::fp8_weight: {
      const int64_t B = c.quant.weight_block_out;
      std::vector<uint8_t> codes, scales;
      for (int64_t tr = r0 / B; tr * B < r1; ++tr) {
        fp8_tile_row(c, t, seed, tr, codes, scales);
        const int64_t a = std::max(r0, tr * B), b = std::min(r1, tr * B + static_cast<int64_t>(codes.size()) / per_row);
        std::memcpy(out.data() + (a - r0) * row_bytes, codes.data() + (a - tr * B) * row_bytes,
                    static_cast<size_t>((b - a) * row_bytes));
      }
      return out;
    }
    case TensorRole::fp8_scale: {
      const TensorSpec* w = table.find(weight_name_of(t.name));
      DSV4_CHECK(w != nullptr);
      std::vector<uint8_t> codes, scales;
      for (int64_t tr = r0; tr < r1; ++tr) {
        fp8_tile_row(c, *w, seed, tr, codes, scales);
        std::memcpy(out.data() + (tr - r0) * row_bytes, scales.data(), scales.size());
      }
      return out;
    }
    case TensorRole::fp4_weight:
    case TensorRole::fp4_scale:
    case TensorRole::engram_table:
    case TensorRole::engram_scale: {
      const bool is_scale = t.role == TensorRole::fp4_scale || t.role == TensorRole::engram_scale;
      const TensorSpec* wp = is_scale ? table.find(weight_name_of(t.name)) : &t;
      DSV4_CHECK(wp != nullptr);
      const TensorSpec& w = *wp;
      const int64_t in = w.role == TensorRole::fp4_weight ? w.shape[1] * 2 : w.shape[1];
      const SynthDistribution d = synth_distribution(c, w);
      const uint64_t wkey = synth_stream_key(seed, w.name);
      std::vector<float> vals(static_cast<size_t>(in));
      std::vector<uint8_t> codes(static_cast<size_t>(w.role == TensorRole::fp4_weight ? in / 2 : in));
      std::vector<uint8_t> scales(static_cast<size_t>(in / 32));
      for (int64_t r = r0; r < r1; ++r) {
        fill_floats(c, w, d, wkey, r * in, vals);
        if (w.role == TensorRole::fp4_weight) quant_fp4_ue8m0(vals, 32, codes, scales);
        else quant_fp8_ue8m0(vals, 32, codes, scales);
        const auto& src = is_scale ? scales : codes;
        std::memcpy(out.data() + (r - r0) * row_bytes, src.data(), src.size());
      }
      return out;
    }
    case TensorRole::tid2eid: {
      const int64_t k = t.shape[1], E = c.n_routed_experts;
      std::vector<int64_t> perm(static_cast<size_t>(E));
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t e = 0; e < E; ++e) perm[e] = e;
        for (int64_t j = 0; j < k; ++j) {  // partial Fisher-Yates: k distinct experts
          const int64_t pick = j + static_cast<int64_t>(hash_at(key, static_cast<uint64_t>(r * k + j)) %
                                                        static_cast<uint64_t>(E - j));
          std::swap(perm[j], perm[pick]);
        }
        std::memcpy(out.data() + (r - r0) * row_bytes, perm.data(), static_cast<size_t>(k * 8));
      }
      return out;
    }
    default: break;
  }
  // Element-wise BF16 / F32 tensors.
  const SynthDistribution d = synth_distribution(c, t);
  std::vector<float> vals(static_cast<size_t>((r1 - r0) * per_row));
  fill_floats(c, t, d, key, r0 * per_row, vals);
  if (t.dtype == DType::bf16) {
    for (size_t j = 0; j < vals.size(); ++j) {
      const uint16_t b = f32_to_bf16(vals[j]);
      std::memcpy(out.data() + 2 * j, &b, 2);
    }
  } else {
    DSV4_CHECK(t.dtype == DType::f32);
    std::memcpy(out.data(), vals.data(), out.size());
  }
  return out;
}


void synth_bytes(const Config& c, const TensorTable& table, const TensorSpec& t, uint64_t seed, int64_t offset,
                 std::span<uint8_t> out) {
  if (out.empty()) return;
  const int64_t row_bytes = row_elems(t) * dtype_size(t.dtype);
  const int64_t end = offset + static_cast<int64_t>(out.size());
  const int64_t r0 = offset / row_bytes, r1 = (end + row_bytes - 1) / row_bytes;
  const std::vector<uint8_t> rows = synth_rows(c, table, t, seed, r0, r1);
  std::memcpy(out.data(), rows.data() + (offset - r0 * row_bytes), out.size());
}

}  // namespace dsv4::family
