// EXL3 linear: validation, dense decode in exact arithmetic, and the rotated CPU matmul.
#include "formats/exl3/linear.h"

#include <cmath>

#include "formats/exl3/hadamard.h"
#include "formats/exl3/half.h"
#include "formats/exl3/trellis.h"

namespace dsv4::exl3 {

Status validate(const Linear& layer) {
  const auto fail = [&](std::string_view what) {
    return error(StatusCode::invalid_argument, "EXL3 layer '{}': {}", layer.name, what);
  };
  if (layer.bits < 1 || layer.bits > 8) return fail(fmt::format("bits per weight {} not in 1..8", layer.bits));
  if (layer.in_features <= 0 || layer.in_features % kHadamardSize)
    return fail(fmt::format("in_features {} is not a positive multiple of 128", layer.in_features));
  if (layer.out_features <= 0 || layer.out_features % kHadamardSize)
    return fail(fmt::format("out_features {} is not a positive multiple of 128", layer.out_features));
  const int64_t words = layer.in_features / 16 * (layer.out_features / 16) * 16 * layer.bits;
  if (static_cast<int64_t>(layer.trellis.size()) != words)
    return fail(fmt::format("trellis holds {} words, expected {}", layer.trellis.size(), words));
  if (static_cast<int64_t>(layer.suh.size()) != layer.in_features)
    return fail(fmt::format("suh has {} elements, expected {}", layer.suh.size(), layer.in_features));
  if (static_cast<int64_t>(layer.svh.size()) != layer.out_features)
    return fail(fmt::format("svh has {} elements, expected {}", layer.svh.size(), layer.out_features));
  if (!layer.bias.empty() && static_cast<int64_t>(layer.bias.size()) != layer.out_features)
    return fail(fmt::format("bias has {} elements, expected {}", layer.bias.size(), layer.out_features));
  return ok_status();
}

std::vector<uint16_t> decode_wq(const Linear& layer) {
  return decode_trellis(layer.trellis, layer.in_features, layer.out_features, layer.bits, layer.codebook);
}

void decode_wq_columns(const Linear& layer, int64_t nt0, int64_t nt1, uint16_t* out) {
  const int64_t in = layer.in_features, tiles_n = layer.out_features / kTile;
  uint16_t tile[16][16];
  for (int64_t nt = nt0; nt < nt1; ++nt)
    for (int64_t kt = 0; kt < in / kTile; ++kt) {
      decode_tile(layer.trellis, kt, nt, tiles_n, layer.bits, layer.codebook, tile);
      for (int r = 0; r < kTile; ++r)
        for (int c = 0; c < kTile; ++c) out[((nt - nt0) * kTile + c) * in + kt * kTile + r] = tile[r][c];
    }
}

std::vector<float> dense_weight(const Linear& layer) {
  const int64_t in = layer.in_features, out = layer.out_features;
  const std::vector<uint16_t> wq = decode_wq(layer);
  std::vector<double> w(wq.size());
  for (size_t i = 0; i < wq.size(); ++i) w[i] = half_bits_to_double(wq[i]);
  for (int64_t n = 0; n < out; ++n)  // H_K: 128-blocks along the input dim (rows)
    for (int64_t k0 = 0; k0 < in; k0 += kHadamardSize) hadamard128_unnormalized(&w[k0 * out + n], out);
  for (int64_t k = 0; k < in; ++k)  // H_N: 128-blocks along the output dim (columns)
    for (int64_t n0 = 0; n0 < out; n0 += kHadamardSize) hadamard128_unnormalized(&w[k * out + n0]);
  std::vector<float> dense(wq.size());
  for (int64_t k = 0; k < in; ++k) {
    const double su = half_bits_to_double(layer.suh[k]) / 128.0;  // the two 1/sqrt(128) factors
    for (int64_t n = 0; n < out; ++n)
      dense[k * out + n] = static_cast<float>(w[k * out + n] * su * half_bits_to_double(layer.svh[n]));
  }
  return dense;
}

template <typename Acc>
void matmul(const Linear& layer, const std::vector<uint16_t>& wq, const float* x, int64_t rows, float* y) {
  const int64_t in = layer.in_features, out = layer.out_features;
  const Acc inv_sqrt = Acc(1) / std::sqrt(Acc(kHadamardSize));
  std::vector<Acc> wqv(wq.size());
  for (size_t i = 0; i < wq.size(); ++i) wqv[i] = static_cast<Acc>(half_bits_to_double(wq[i]));
  std::vector<Acc> u(in), v(out);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < in; ++k) u[k] = Acc(x[r * in + k]) * Acc(half_bits_to_double(layer.suh[k]));
    for (int64_t k0 = 0; k0 < in; k0 += kHadamardSize) hadamard128_unnormalized(&u[k0]);
    for (int64_t k = 0; k < in; ++k) u[k] *= inv_sqrt;
    for (int64_t n = 0; n < out; ++n) v[n] = 0;
    for (int64_t k = 0; k < in; ++k) {  // v = u·Wq, k in order for every n
      const Acc uk = u[k];
      const Acc* wrow = &wqv[k * out];
      for (int64_t n = 0; n < out; ++n) v[n] += uk * wrow[n];
    }
    for (int64_t n0 = 0; n0 < out; n0 += kHadamardSize) hadamard128_unnormalized(&v[n0]);
    for (int64_t n = 0; n < out; ++n) {
      Acc value = v[n] * inv_sqrt * Acc(half_bits_to_double(layer.svh[n]));
      if (!layer.bias.empty()) value += Acc(half_bits_to_double(layer.bias[n]));
      y[r * out + n] = static_cast<float>(value);
    }
  }
}

template void matmul<float>(const Linear&, const std::vector<uint16_t>&, const float*, int64_t, float*);
template void matmul<double>(const Linear&, const std::vector<uint16_t>&, const float*, int64_t, float*);

}  // namespace dsv4::exl3
